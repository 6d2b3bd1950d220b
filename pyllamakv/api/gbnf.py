"""GBNF (llama.cpp's grammar format) to llguidance's Lark, with llama.cpp's meaning.

llguidance parses GBNF itself (``llguidance.gbnf_to_lark``) and turns every rule
made only of characters into one *lexeme*, which its lexer matches greedily: a
lexeme that can grow (``ws ::= [ \\t\\n]*``, ``num ::= [0-9]+ ws``) swallows what
the next rule needed. llama.cpp's grammar engine has no lexer and keeps every
reading alive, so there ``num "\\n"`` ends a line; under llguidance's reading
``num`` eats the newline and llama.cpp's ``grammars/arithmetic.gbnf`` can never
start its second line.

Here the same parse is kept, but a rule stays a lexeme only where greedy
matching keeps its meaning: a lexeme whose match can grow at its end (an open
repetition or an optional part last, or a reference to such a rule, as the
``ws`` that llama.cpp's grammars put after every token) becomes a grammar rule
whose characters are lexemes of their own, and llguidance's Earley parser keeps
the readings apart, as llama.cpp does. Such a rule's leading part up to its
last closed part (a JSON string's quotes and characters before its ``ws``)
stays one lexeme, so the common shapes lose little speed. The judgement is by
shape, not by the language: a lexeme whose growth comes from inside (``[a]*
"a"``) is kept, as llguidance keeps it.
"""
from __future__ import annotations

from llguidance import gbnf_to_lark as _g
from llguidance.gbnf_to_lark import is_lark_syntax  # noqa: F401  (re-exported)


def _nullable(node) -> bool:
    if isinstance(node, _g.LiteralNode):
        return node.value == ""
    if isinstance(node, _g.RegexNode):
        return False
    if isinstance(node, _g.RuleRefNode):
        return node.target is None or _nullable(node.target.alternatives)
    if isinstance(node, _g.RepetitionNode):
        return node.min_times == 0 or _nullable(node.node)
    if isinstance(node, _g.SequenceNode):
        return all(_nullable(n) for n in node.nodes)
    if isinstance(node, _g.AlternativeNode):
        return any(_nullable(a) for a in node.alternatives)
    return True


def _open_end(node, seen=()) -> bool:
    """A complete match of node may go on growing at its end (judged by shape)."""
    if isinstance(node, (_g.LiteralNode, _g.RegexNode)):
        return False
    if isinstance(node, _g.RuleRefNode):
        t = node.target
        return t is None or t.name in seen or _open_end(t.alternatives, (*seen, t.name))
    if isinstance(node, _g.RepetitionNode):
        return node.max_times != node.min_times or _open_end(node.node, seen)
    if isinstance(node, _g.SequenceNode):
        if not node.nodes:
            return False
        last = node.nodes[-1]
        return _open_end(last, seen) or _nullable(last)
    if isinstance(node, _g.AlternativeNode):
        alts = node.alternatives
        if any(_open_end(a, seen) for a in alts):
            return True
        if all(isinstance(a, _g.RegexNode) for a in alts):
            return False         # single characters
        if all(isinstance(a, _g.LiteralNode) for a in alts):
            vals = [a.value for a in alts]
            return any(a != b and b.startswith(a) for a in vals for b in vals)
        return True              # mixed shapes: one may be a prefix of another
    return True


def _terminal(node) -> bool:
    if isinstance(node, _g.RuleRefNode):
        return node.target is not None and node.target.rule_is_terminal
    return all(_terminal(c) for c in node.children())


def _split_head(rule, rules) -> None:
    """In each alternative of rule, the leading parts up to its last closed
    part become one lexeme of their own again (one lexer step, not one parser
    step per character)."""
    alts = rule.alternatives
    alts = alts.alternatives if isinstance(alts, _g.AlternativeNode) else [alts]
    for alt in alts:
        if not isinstance(alt, _g.SequenceNode):
            continue
        n = 0
        while n < len(alt.nodes) and _terminal(alt.nodes[n]):
            n += 1
        while n >= 2 and (_open_end(alt.nodes[n - 1]) or _nullable(alt.nodes[n - 1])):
            n -= 1
        if n < 2 or all(isinstance(x, _g.LiteralNode) for x in alt.nodes[:n]):
            continue             # (literals alone are lexemes already)
        name = f"{rule.name.upper()}_HEAD"
        while name in rules:
            name += "_"
        head = _g.RuleNode(name, _g.SequenceNode(alt.nodes[:n]), "", rule_is_terminal=True)
        head.order = rule.order
        rules[name] = head
        alt.nodes[:n] = [_g.RuleRefNode(name, head)]


def gbnf_to_lark(text: str) -> str:
    """text (GBNF) as a Lark grammar for llguidance, lexemes only where greedy
    lexing keeps llama.cpp's meaning; parse errors as llguidance raises them."""
    rules = _g.GrammarParser().parse(text)
    _g.resolve(rules)              # names, references, and llguidance's lexeme choice
    changed = True
    while changed:                 # demote the open-ended, and whatever uses them
        changed = False
        for r in rules.values():
            if r.rule_is_terminal and (_open_end(r.alternatives)
                                       or not _terminal(r.alternatives)):
                r.rule_is_terminal, changed = False, True
    for r in list(rules.values()):
        if not r.rule_is_terminal:
            _split_head(r, rules)
    for r in list(rules.values()):
        if not r.rule_is_terminal and r.name != r.name.lower():
            name = r.name.lower()
            while name in rules:
                name += "_"
            del rules[r.name]
            r.name = name
            rules[name] = r
    out = "%llguidance {}\n\n"
    for r in sorted(rules.values(), key=lambda r: r.order):
        out += f"{r}\n\n"
    return out
