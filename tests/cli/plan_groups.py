#!/usr/bin/python3
"""Usage: plan_groups.py PLAN_JSON EXPECTED

Checks the groups of a plan (`fusec compile --emit plan`) against a list
written from the model's architecture: each line of EXPECTED is
`COUNT RULE OP...` (RULE `-` for a group no rule formed), and the plan must
hold exactly those groups, as many of each, with those ops in that order.
Lines starting with `#` are comments. Prints the difference; exit status 1
when there is one.
"""
import collections
import json
import sys


def main():
    plan_path, expected_path = sys.argv[1], sys.argv[2]
    with open(plan_path) as f:
        plan = json.load(f)
    got = collections.Counter((g["rule"] or "-", tuple(n["op"] for n in g["nodes"])) for g in plan["groups"])
    want = collections.Counter()
    with open(expected_path) as f:
        for line in f:
            fields = line.split()
            if not fields or fields[0].startswith("#"):
                continue
            want[(fields[1], tuple(fields[2:]))] += int(fields[0])
    ok = True
    for key in sorted(set(got) | set(want)):
        if got[key] != want[key]:
            ok = False
            print(f"{key[0]} {' '.join(key[1])}: {got[key]} in the plan, {want[key]} expected")
    print(f"{sum(got.values())} groups in the plan, {sum(want.values())} expected: " + ("same groups" if ok else "they differ"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
