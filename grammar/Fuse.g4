// The .fuse rule language. See docs/language.md for what each construct means.
// Kinds, traits, types and function names are plain identifiers checked by
// sema, so a misspelling gets a located message instead of a syntax error.
grammar Fuse;

file : packHeader? item* EOF ;

packHeader : 'pack' name=IDENT ('version' version=STRING)? ;

item
  : importDecl
  | opDecl
  | classDecl
  | ruleDecl
  | disableDecl
  ;

importDecl : 'import' path=STRING ;

// op Relu(x) elementwise = max(x, 0.0)
// op Equal(a, b): bool broadcast commutative = a == b
// op Dropout(x, ratio?, training_mode?) -> (y, mask?: bool) elementwise { seed: int = 0 } = x
// op MatMul(A, B) anchor cost { flops = 2 * numel(Y) * shape(A)[rank(A) - 1] }
opDecl
  : 'op' name=IDENT '(' (params+=param (',' params+=param)*)? ')'
    (':' resultType=IDENT)?
    ('->' '(' results+=param (',' results+=param)* ')')?
    traits+=IDENT+
    attrDecls?
    ('=' semantics=expr)?
    ('cost' '{' costs+=costItem* '}')?
  ;

param : name=IDENT (optional='?' | variadic='...')? (':' type=IDENT)? ;

attrDecls : '{' (attrs+=attrDecl (',' attrs+=attrDecl)* ','?)? '}' ;
// `pads?: ints` is optional without a default; `group: int = 1` has one;
// `to: int` is required.
attrDecl : name=IDENT optional='?'? ':' type=IDENT ('=' value=expr)? ;

// class Activation = Relu | Sigmoid | Tanh
classDecl : 'class' name=IDENT '=' members+=IDENT ('|' members+=IDENT)* ;

ruleDecl : override='override'? 'rule' name=IDENT '{' clauses+=ruleClause* '}' ;

disableDecl : 'disable' 'rule' name=IDENT ;

ruleClause
  : 'match' '{' patternStmt* '}'          # matchClause
  | 'fuse' '{' patternStmt* '}'           # fuseClause
  | 'where' expr                          # whereClause
  | 'rewrite' '{' rewriteStmt* '}'        # rewriteClause
  | 'kernel' family=IDENT                 # kernelClause
  | 'cost' '{' costItem* '}'              # costClause
  | 'priority' value=NUMBER               # priorityClause
  | 'tolerance' '{' costItem* '}'         # toleranceClause
  ;

// c = Conv(x, w, b?) { group: 1, strides: s }
patternStmt : names+=IDENT (',' names+=IDENT)* '=' patternCall ';'? ;

patternCall : opRef '(' (args+=patternArg (',' args+=patternArg)*)? ')' attrPattern? ;

// Conv, (Relu | Sigmoid), Elementwise+ (maximal chain), Elementwise* (zero or more)
opRef
  : name=IDENT repeat=('+' | '*')?                                     # singleOpRef
  | '(' alts+=IDENT ('|' alts+=IDENT)+ ')' repeat=('+' | '*')?        # altOpRef
  ;

patternArg
  : patternCall                           # nestedArg
  | name=IDENT optional='?'?              # nameArg
  | '_'                                   # wildcardArg
  | '...'                                 # restArg
  ;

attrPattern : '{' items+=attrMatch (',' items+=attrMatch)* ','? '}' ;
attrMatch : name=IDENT ':' value=expr ;

// y = Conv(x, w2, b2) { attrs(c), group: 2 }
rewriteStmt : names+=IDENT (',' names+=IDENT)* '=' value=expr attrSet? ';'? ;
attrSet : '{' items+=attrAssign (',' items+=attrAssign)* ','? '}' ;
attrAssign
  : 'attrs' '(' from=IDENT ')'            # copyAttrs
  | name=IDENT ':' value=expr             # setAttr
  ;

costItem : name=IDENT '=' value=expr ';'? ;

expr
  : primary                                               # primaryExpr
  | expr '.' member=IDENT (call='(' (args+=expr (',' args+=expr)*)? ')')?  # memberExpr
  | expr '[' index=expr ']'                               # indexExpr
  | op='-' expr                                           # unaryExpr
  | lhs=expr op=('*' | '/' | '%') rhs=expr                # binaryExpr
  | lhs=expr op=('+' | '-') rhs=expr                      # binaryExpr
  | lhs=expr op=('<' | '<=' | '>' | '>=' | '==' | '!=') rhs=expr  # binaryExpr
  | op='not' expr                                         # unaryExpr
  | lhs=expr op='and' rhs=expr                            # binaryExpr
  | lhs=expr op='or' rhs=expr                             # binaryExpr
  | lhs=expr op='??' rhs=expr                             # binaryExpr
  ;

primary
  : NUMBER                                                # numberLit
  | STRING                                                # stringLit
  | value=('true' | 'false')                              # boolLit
  | callee=IDENT '(' (args+=expr (',' args+=expr)*)? ')'  # callExpr
  | name=IDENT                                            # nameExpr
  | '(' expr ')'                                          # parenExpr
  | '[' (items+=expr (',' items+=expr)*)? ']'             # listExpr
  ;

NUMBER : DIGITS ('.' DIGITS?)? EXPONENT? | '.' DIGITS EXPONENT? ;
fragment DIGITS : [0-9]+ ;
fragment EXPONENT : [eE] [+-]? DIGITS ;
STRING : '"' (~["\\\r\n] | '\\' .)* '"' ;
IDENT : [A-Za-z_] [A-Za-z_0-9]* ;
LINE_COMMENT : '//' ~[\r\n]* -> channel(HIDDEN) ;
BLOCK_COMMENT : '/*' .*? '*/' -> channel(HIDDEN) ;
WS : [ \t\r\n]+ -> skip ;
// Anything else becomes a token of its own, so the lexer never fails and the
// parser reports it with a location.
UNKNOWN_CHAR : . ;
