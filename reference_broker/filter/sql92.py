"""This module owns RocketMQ's SQL92 message selector: tokenizer, parser and evaluator, sans-IO
(filter/.../parser/SelectorParser.jj and filter/.../expression/*.java, 4.9.8 — itself ActiveMQ's JMS selector
without LIKE, arithmetic and hex/octal literals).

Grammar (lowest precedence first; keywords and the exponent letter ignore case)::

    selector   := or                                  (must yield a boolean, or be a bare property)
    or         := and ("OR" and)*
    and        := equality ("AND" equality)*
    equality   := comparison ("=" comparison | "<>" comparison | "IS" "NULL" | "IS" "NOT" "NULL")*
    comparison := unary (("<" | "<=" | ">" | ">=") unary
                         | ["NOT"] "BETWEEN" unary "AND" unary
                         | ["NOT"] "IN" "(" string ("," string)* ")")*
    unary      := "+" unary | "-" unary | "NOT" unary | primary
    primary    := literal | identifier | "(" or ")"
    literal    := 'string' ('' escapes ') | decimal (long, optional L) | float (double) | TRUE | FALSE | NULL
    identifier := [A-Za-z_$][A-Za-z0-9_$]*

Like 4.9.8's JavaCC parser, parsing stops at the first token that cannot continue the expression: whatever
follows is ignored (``a = 1 b`` is ``a = 1``); only the one token the parser looked at must lex.

Values are Java's: property values are strings (or missing → null); literals are long, double, string or
boolean. Evaluation yields True, False or None (unknown); a selector matches only on True. Where 4.9.8 throws
during evaluation (a string that does not parse as the number it is compared with, a boolean compared with a
string on the right) :class:`SelectorEvalError` is raised, and the broker treats the message as not matching
(ExpressionMessageFilter.isMatchedByCommitLog logs and returns false). The asymmetries are 4.9.8's, kept on
purpose: ``a = 'x'`` with ``a`` missing is null but ``'x' = a`` is false; ``a > 5`` reads ``a`` as a long
(``'5.5'`` is an error) while ``a > 5.0`` reads it as a double; two properties compared with ``<``/``>`` are
read as doubles, with ``=`` as strings.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

Value = str | int | float | bool | None
Context = Mapping[str, str]
Evaluator = Callable[[Context], Value]

KEYWORDS: Final = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
_WHITESPACE: Final = " \t\n\r\f"  # SelectorParser.jj SPECIAL_TOKEN
_OPERATORS: Final = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")
_FLOAT: Final = re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+")
_DECIMAL: Final = re.compile(r"0|[1-9][0-9]*[lL]?")
_STRING: Final = re.compile(r"'(?:''|[^'])*'")
_ID: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_LINE_COMMENT: Final = re.compile(r"--[^\n\r]*(?:\n|\r\n?)")
_BLOCK_COMMENT: Final = re.compile(r"/\*.*?\*/", re.DOTALL)
_ID_START: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_$")
_NUMBER_START: Final = frozenset("0123456789.")
LONG_MIN: Final = -(1 << 63)
LONG_MAX: Final = (1 << 63) - 1
DOUBLE_MIN_VALUE: Final = 5e-324  # Double.MIN_VALUE, the smallest positive double
DOUBLE_MAX_VALUE: Final = 1.7976931348623157e308
# Our bound (4.9.8 has none): parsing costs tens of µs per term on the broker's event loop, so a selector of
# megabytes in a heartbeat would hold every other client for seconds. Real selectors are far shorter.
MAX_SELECTOR_CHARS: Final = 16 * 1024


class SelectorParseError(ValueError):
    """A malformed selector: ``position`` is the 0-based offset of the offending token; ``java`` is what
    4.9.8 says of it (the exception's class and message, as CHECK_CLIENT_CONFIG's remark carries it)."""

    def __init__(self, message: str, position: int, java: str) -> None:
        super().__init__(f"{message} at column {position + 1}")
        self.message = message
        self.position = position
        self.java = java


class SelectorEvalError(ValueError):
    """4.9.8 throws while evaluating (NumberFormatException, ClassCastException): the message does not match.
    ``java_class`` names the Java exception (the parser reports it when comparing BETWEEN's constant bounds)."""

    def __init__(self, message: str, java_class: str = "java.lang.NumberFormatException") -> None:
        super().__init__(message)
        self.java_class = java_class


# ---- Java value semantics --------------------------------------------------------------------------------

_JAVA_LONG: Final = re.compile(r"[+-]?\d+")  # Long.valueOf: Character.digit accepts any Unicode decimal digit
_JAVA_DOUBLE: Final = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_HEX_DOUBLE: Final = re.compile(
    r"([+-]?0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?")


def java_long(text: str) -> int:
    """Long.valueOf(String): no surrounding blanks, no underscores, within the signed 64-bit range."""
    if len(text) > 20 or _JAVA_LONG.fullmatch(text) is None:  # 20: a sign and 19 digits
        raise SelectorEvalError(f'For input string: "{text}"')
    value = int(text)
    if not LONG_MIN <= value <= LONG_MAX:
        raise SelectorEvalError(f'For input string: "{text}"')
    return value


def java_double(text: str) -> float:
    """Double.valueOf(String): String.trim() first (every char <= U+0020), then Java's float syntax
    (NaN, Infinity, a d/f suffix, hexadecimal with a binary exponent)."""
    i, j = 0, len(text)
    while i < j and text[i] <= " ":
        i += 1
    while j > i and text[j - 1] <= " ":
        j -= 1
    s = text[i:j]
    if _JAVA_DOUBLE.fullmatch(s):
        body = s[:-1] if s[-1] in "fFdD" else s
        return float(body.replace("Infinity", "inf").replace("NaN", "nan"))
    hexa = _JAVA_HEX_DOUBLE.fullmatch(s)
    if hexa:
        return float.fromhex(hexa.group(1))
    raise SelectorEvalError(f'For input string: "{s}"' if s else "empty String")


def _double_key(x: float) -> tuple[int, float]:
    """Double.compareTo's order: -0.0 < 0.0, and NaN above everything, equal to itself."""
    if math.isnan(x):
        return (2, 0.0)
    if x == 0.0:
        return (1, 0.0) if math.copysign(1.0, x) > 0 else (0, 0.0)
    return (1 if x > 0 else 0, x)


def _cmp(a: object, b: object) -> int:
    return int((a > b) - (a < b))  # type: ignore[operator]


def java_compare(lv: Value, rv: Value) -> int:
    """ComparisonExpression.__compare with convertStringExpressions on (SelectorParser sets it): unlike types
    are converted up (long → double, a string to the other side's type); pairs it cannot convert answer -1."""
    tl, tr = type(lv), type(rv)
    if tl is tr:
        if tl is float:
            return _cmp(_double_key(lv), _double_key(rv))  # type: ignore[arg-type]
        if tl is str:  # String.compareTo orders UTF-16 code units; only equality is cheap to decide
            return 0 if lv == rv else _cmp(lv.encode("utf-16-be"), rv.encode("utf-16-be"))  # type: ignore[union-attr]
        return _cmp(lv, rv)
    if tl is bool:
        if tr is str:  # 4.9.8 casts the Boolean to String here: ClassCastException (JDK 17's text)
            raise SelectorEvalError("class java.lang.Boolean cannot be cast to class java.lang.String "
                                    "(java.lang.Boolean and java.lang.String are in module java.base of loader "
                                    "'bootstrap')", "java.lang.ClassCastException")
        return -1
    if tl is int:
        if tr is float:
            return _cmp(_double_key(float(lv)), _double_key(rv))  # type: ignore[arg-type]
        if tr is str:
            return _cmp(lv, java_long(rv))  # type: ignore[arg-type]
        return -1
    if tl is float:
        if tr is int:
            return _cmp(_double_key(lv), _double_key(float(rv)))  # type: ignore[arg-type]
        if tr is str:
            return _cmp(_double_key(lv), _double_key(java_double(rv)))  # type: ignore[arg-type]
        return -1
    # a string against a boolean (Boolean.valueOf), a long or a double
    if tr is bool:
        return _cmp(lv.lower() == "true", rv)  # type: ignore[union-attr]
    if tr is int:
        return _cmp(java_long(lv), rv)  # type: ignore[arg-type]
    return _cmp(_double_key(java_double(lv)), _double_key(rv))  # type: ignore[arg-type]


# ---- Java's text for values and expressions (the parser's error messages quote them) --------------------------

def java_double_str(d: float) -> str:
    """Double.toString: plain between 10^-3 and 10^7, else computerized scientific notation (1.0E10)."""
    if math.isnan(d):
        return "NaN"
    if math.isinf(d):
        return "Infinity" if d > 0 else "-Infinity"
    if d == 0.0:
        return "0.0" if math.copysign(1.0, d) > 0 else "-0.0"
    sign = "-" if d < 0 else ""
    digits, exp = _shortest_digits(abs(d))  # value = 0.digits × 10^exp
    if 1e-3 <= abs(d) < 1e7:
        if exp <= 0:
            return f"{sign}0.{'0' * -exp}{digits}"
        whole, frac = digits[:exp].ljust(exp, "0"), digits[exp:]
        return f"{sign}{whole}.{frac or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp - 1}"


def _shortest_digits(x: float) -> tuple[str, int]:
    """The shortest digits that read back as ``x`` (repr's), and where the point goes: x = 0.DIGITS × 10^n."""
    _sign, digits, exp = Decimal(repr(x)).normalize().as_tuple()
    assert isinstance(exp, int)
    text = "".join(map(str, digits))
    return text, len(text) + exp


def java_object_str(v: Value) -> str:
    """String.valueOf(Object) of a value: what String.format's %s writes."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return java_double_str(v)
    return str(v)


def java_value_str(v: Value) -> str:
    """ConstantExpression.toString (and String.valueOf of a value): NULL, TRUE / FALSE, 'quoted', numbers."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, float):
        return java_double_str(v)
    return str(v)


# ---- expression tree -------------------------------------------------------------------------------------

class Node:
    """``kind`` is the 4.9.8 class family the parser's checks look at: "const" (ConstantExpression),
    "bool_const" (TRUE / FALSE / NULL: both constant and boolean), "bool" (BooleanExpression), "prop"
    (PropertyExpression), "other" (a negation). ``text`` is the expression's Java toString, built only when an
    error message quotes it (building it for every node would cost a long selector quadratic time)."""

    __slots__ = ("describe", "evaluate", "kind", "value")

    def __init__(self, kind: str, evaluate: Evaluator, value: Value = None,
                 describe: Callable[[], str] | str = "") -> None:
        self.kind = kind
        self.evaluate = evaluate
        self.value = value
        self.describe = describe

    @property
    def text(self) -> str:
        d = self.describe
        if isinstance(d, str):
            return d
        try:
            return d()
        except RecursionError:
            return "(…)"


def _const(value: Value) -> Node:
    kind = "bool_const" if value is None or isinstance(value, bool) else "const"
    return Node(kind, lambda ctx: value, value, java_value_str(value))


def _is_const(n: Node) -> bool:
    return n.kind in ("const", "bool_const")


def _is_bool(n: Node) -> bool:
    return n.kind in ("bool", "bool_const")


def _negate(n: Node) -> Node:
    """UnaryExpression.createNegate: never folded into a constant; a non-number (a property's string
    included) negates to null."""
    inner = n.evaluate

    def ev(ctx: Context) -> Value:
        v = inner(ctx)
        if v is None or isinstance(v, (bool, str)):
            return None
        return -v if isinstance(v, float) or v != LONG_MIN else LONG_MIN  # Java long negation wraps
    return Node("other", ev, describe=lambda: f"(- {n.text})")


def _not(n: Node) -> Node:
    inner = n.evaluate

    def ev(ctx: Context) -> Value:
        v = inner(ctx)
        return None if v is None else not v
    return Node("bool", ev, describe=lambda: f"(NOT {n.text})")


def _boolean_cast(n: Node) -> Node:
    """UnaryExpression.createBooleanCast: a bare property is true only if it holds a Boolean — a property
    value is always a string, so a present property is false and a missing one null."""
    inner = n.evaluate

    def ev(ctx: Context) -> Value:
        v = inner(ctx)
        return None if v is None else (v if isinstance(v, bool) else False)
    return Node("bool", ev, describe=lambda: n.text)


def _logic(a: Node, b: Node, decisive: bool, op: str) -> Node:
    """LogicExpression.createAND (``decisive`` False) and createOR (True): left first; a decisive answer on
    either side decides; otherwise null if either side is null."""
    la, lb = a.evaluate, b.evaluate

    def ev(ctx: Context) -> Value:
        lv = la(ctx)
        if lv is decisive:
            return decisive
        rv = lb(ctx)
        if rv is decisive:
            return decisive
        return None if lv is None or rv is None else not decisive
    return Node("bool", ev, describe=lambda: f"({a.text} {op} {b.text})")


def _and(a: Node, b: Node) -> Node:
    return _logic(a, b, False, "AND")


def _or(a: Node, b: Node) -> Node:
    return _logic(a, b, True, "OR")


def _equal(a: Node, b: Node) -> Node:
    la, lb = a.evaluate, b.evaluate

    def ev(ctx: Context) -> Value:  # ComparisonExpression.doCreateEqual: both sides are evaluated
        lv, rv = la(ctx), lb(ctx)
        if (lv is None) != (rv is None):
            return None if lv is None else False
        if lv is None:
            return True
        if type(lv) is str and type(rv) is str:  # the common case: equals
            return lv == rv
        return java_compare(lv, rv) == 0
    return Node("bool", ev, describe=lambda: f"({a.text} == {b.text})")


_ORDER: Final[dict[str, Callable[[int], bool]]] = {
    ">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


def _order(op: str, a: Node, b: Node) -> Node:
    la, lb, test = a.evaluate, b.evaluate, _ORDER[op]

    def ev(ctx: Context) -> Value:  # ComparisonExpression.evaluate: a null left skips the right side
        lv = la(ctx)
        if lv is None:
            return None
        rv = lb(ctx)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):  # two strings are compared as doubles
            return test(java_compare(java_double(lv), java_double(rv)))
        return test(java_compare(lv, rv))
    return Node("bool", ev, describe=lambda: f"({a.text} {op} {b.text})")


def _in(prop: Node, values: list[str], negated: bool) -> Node:
    inner = prop.evaluate
    members = frozenset(values)

    def ev(ctx: Context) -> Value:  # UnaryInExpression: only a string can be in the list
        v = inner(ctx)
        if not isinstance(v, str):
            return None
        return (v not in members) if negated else (v in members)
    return Node("bool", ev, describe=lambda: f"{prop.text} {'NOT IN' if negated else 'IN'} "
                                             f"( {', '.join(java_value_str(v) for v in values)} )")


# ---- tokenizer -------------------------------------------------------------------------------------------

# SelectorParserConstants.tokenImage (4.9.8): a token kind's number orders JavaCC's "Was expecting" list.
TOKEN_KINDS: Final = ("EOF", "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "DECIMAL", "FLOAT",
                      "STRING", "ID", "=", "<>", ">", ">=", "<", "<=", "(", ",", ")", "+", "-")
_KIND_NUMBER: Final = {k: i for i, k in enumerate(
    ("EOF", "", "", "", "", "", "", "", "NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS",
     "DECIMAL", "FLOAT", "", "STRING", "ID", "=", "<>", ">", ">=", "<", "<=", "(", ",", ")", "+", "-")) if k}
_KIND_IMAGE: Final = {"EOF": "<EOF>", "DECIMAL": "<DECIMAL_LITERAL>", "FLOAT": "<FLOATING_POINT_LITERAL>",
                      "STRING": "<STRING_LITERAL>", "ID": "<ID>"}
_UNARY_FIRST: Final = ("-", "NOT", "TRUE", "FALSE", "NULL", "DECIMAL", "FLOAT", "STRING", "ID", "(")  # not "+"
_COMPARISON_LOOP: Final = ("NOT", "BETWEEN", "IN", ">", ">=", "<", "<=")


def _image(kind: str) -> str:
    return _KIND_IMAGE.get(kind, f'"{kind}"')


def _java_escape(text: str) -> str:
    """JavaCC's add_escapes."""
    out = []
    for ch in text:
        esc = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "'": "\\'",
               "\\": "\\\\"}.get(ch)
        if esc is not None:
            out.append(esc)
        elif ord(ch) < 0x20 or ord(ch) > 0x7E:
            out.append("".join(f"\\u{u:04x}" for u in _utf16(ch)))
        else:
            out.append(ch)
    return "".join(out)


def _utf16(ch: str) -> list[int]:
    b = ch.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(b[i:i + 2], "big") for i in range(0, len(b), 2)]


def line_column(text: str, index: int) -> tuple[int, int]:
    """SimpleCharStream's line and column of the char at ``index`` (1-based; a tab moves to the next multiple
    of 8, CR LF is one line break); (0, 0) before the first char."""
    line, column = 1, 0
    prev_cr = prev_lf = False
    if index < 0:
        return 0, 0
    for ch in text[:index + 1]:
        column += 1
        if prev_lf:
            prev_lf = False
            line += 1
            column = 1
        elif prev_cr:
            prev_cr = False
            if ch == "\n":
                prev_lf = True
            else:
                line += 1
                column = 1
        if ch == "\r":
            prev_cr = True
        elif ch == "\n":
            prev_lf = True
        elif ch == "\t":
            column -= 1
            column += 8 - (column % 8)
    return line, column


@dataclass(frozen=True)
class Token:
    kind: str  # one of TOKEN_KINDS
    text: str
    position: int


class Lexer:
    """Lazy, as JavaCC's token manager is: a lexical error is raised only for a token the parser asks for."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def next(self) -> Token:
        text, pos, n = self.text, self.pos, len(self.text)
        while True:
            while pos < n and text[pos] in _WHITESPACE:
                pos += 1
            if pos < n and text[pos] in "-/":
                comment = _LINE_COMMENT.match(text, pos) or _BLOCK_COMMENT.match(text, pos)
                if comment is not None:
                    pos = comment.end()
                    continue
            break
        if pos >= n:
            self.pos = pos
            return Token("EOF", "", pos)
        # The first char decides which kinds can match (JavaCC takes the longest match; keywords win ties).
        ch = text[pos]
        if ch in _ID_START:
            end = _ID.match(text, pos).end()  # type: ignore[union-attr]
            upper = text[pos:end].upper()
            kind = upper if upper in KEYWORDS else "ID"
        elif ch in _NUMBER_START:
            f, d = _FLOAT.match(text, pos), _DECIMAL.match(text, pos)
            f_end, d_end = (f.end() if f else -1), (d.end() if d else -1)
            if f_end < 0 and d_end < 0:
                raise self._lexical_error(pos)
            end, kind = (f_end, "FLOAT") if f_end > d_end else (d_end, "DECIMAL")
        elif ch == "'":
            m = _STRING.match(text, pos)
            if m is None:
                raise self._lexical_error(pos)
            end, kind = m.end(), "STRING"
        else:
            for op in _OPERATORS:
                if text.startswith(op, pos):
                    end, kind = pos + len(op), op
                    break
            else:
                raise self._lexical_error(pos)
        self.pos = end
        return Token(kind, text[pos:end], pos)

    def _lexical_error(self, pos: int) -> SelectorParseError:
        """TokenMgrError's text (4.9.8's JavaCC token manager): the char that failed with what had been read of
        the token before it, or <EOF> when the input ended first (an open 'string or /* comment)."""
        text = self.text
        if text[pos] == "'" or text.startswith("/*", pos):
            read = len(text) - pos  # still a prefix of a token when the input ends
        elif text[pos] == "/":
            read = 1
        else:
            read = 0
        fail = pos + read
        if fail < len(text) and fail + 1 < len(text):
            failed = text[fail]
            line, column = line_column(text, fail)
            encountered = f'"{_java_escape(failed)}" ({ord(failed)}), '
            after = text[pos:fail]
        else:  # the token manager read on and met the end of the input
            last = min(fail, len(text) - 1)
            line, column = line_column(text, last)
            if text[last] in "\r\n":
                line, column = line + 1, 0
            else:
                column += 1
            encountered = "<EOF> "
            after = text[pos:last + 1] if last + 1 - pos > 1 else ""
        java = (f"org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at line {line}, column {column}.  "
                f'Encountered: {encountered}after : "{_java_escape(after)}"')
        return SelectorParseError(f"Lexical error: unexpected character {text[pos]!r}", pos, java)


# ---- parser ----------------------------------------------------------------------------------------------

class _Parser:
    """Recursive descent over 4.9.8's grammar. ``expected`` collects the token kinds each choice point the
    parser looked at since the last consumed token would have taken — what JavaCC lists as "Was expecting"."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lexer = Lexer(text)
        self.tokens: list[Token] = []
        self.expected: set[str] = set()

    def peek(self, k: int = 0) -> Token:
        while len(self.tokens) <= k:
            if self.tokens and self.tokens[-1].kind == "EOF":
                return self.tokens[-1]
            self.tokens.append(self.lexer.next())
        return self.tokens[k]

    def consume(self) -> Token:
        tok = self.peek()
        self.tokens.pop(0)
        self.expected = set()
        return tok

    def at(self, *kinds: str) -> bool:
        """A choice point: the current token starts one of ``kinds``; if not, they are expected."""
        if self.peek().kind in kinds:
            return True
        self.expected.update(kinds)
        return False

    def take(self, kind: str) -> Token:
        if self.peek().kind != kind:
            self.expected.add(kind)
            raise self.syntax_error()
        return self.consume()

    def syntax_error(self) -> SelectorParseError:
        """ParseException's text for the current token and what was expected."""
        tok = self.peek()
        if tok.kind == "EOF":
            line, column = line_column(self.text, len(self.text) - 1)
            encountered = "<EOF>"
        else:
            line, column = line_column(self.text, tok.position)
            encountered = f' {_image(tok.kind)} "{_java_escape(tok.text)} "'
        kinds = sorted(self.expected, key=_KIND_NUMBER.__getitem__)
        listed = "".join(f"{_image(k)} ...\n    " for k in kinds)
        java = (f"org.apache.rocketmq.filter.parser.ParseException: Encountered \"{encountered}\" at line {line}, "
                f"column {column}.\nWas expecting{':' if len(kinds) == 1 else ' one of:'}\n    {listed}")
        what = tok.text or "the end"
        return SelectorParseError(f"unexpected {what!r}, expected one of {', '.join(kinds)}", tok.position, java)

    def as_boolean(self, n: Node, at: int) -> Node:
        if _is_bool(n):
            return n
        if n.kind == "prop":
            return _boolean_cast(n)
        java = "org.apache.rocketmq.filter.parser.ParseException: Expression will not result in a boolean value: "
        raise SelectorParseError(f"{n.text} is not a boolean expression", at, java + n.text)

    def selector(self) -> Node:
        start = self.peek().position
        return self.as_boolean(self.or_expr(), start)

    def or_expr(self) -> Node:
        start = self.peek().position
        left = self.and_expr()
        while self.at("OR"):
            self.consume()
            right_at = self.peek().position
            right = self.and_expr()  # the action runs once both operands are parsed: the right's errors first
            left = _or(self.as_boolean(left, start), self.as_boolean(right, right_at))
        return left

    def and_expr(self) -> Node:
        start = self.peek().position
        left = self.equality()
        while self.at("AND"):
            self.consume()
            right_at = self.peek().position
            right = self.equality()
            left = _and(self.as_boolean(left, start), self.as_boolean(right, right_at))
        return left

    def equality(self) -> Node:
        left = self.comparison()
        while self.at("IS", "=", "<>"):
            tok = self.consume()
            if tok.kind in ("=", "<>"):
                right = self.comparison()
                _check_equal_operands(left, right, tok.position)
                left = _equal(left, right) if tok.kind == "=" else _not(_equal(left, right))
            elif self.peek().kind == "NULL":
                self.consume()
                left = _equal(left, _const(None))
            else:
                self.take("NOT")
                self.take("NULL")
                left = _not(_equal(left, _const(None)))
        return left

    def comparison(self) -> Node:
        left = self.unary()
        while self.at(*_COMPARISON_LOOP):
            tok = self.peek()
            negated = tok.kind == "NOT"
            if negated and self.peek(1).kind not in ("BETWEEN", "IN"):
                self.expected.update(("BETWEEN", ">", ">=", "<", "<=", "IN"))  # NOT BETWEEN / NOT IN
                raise self.syntax_error()
            self.consume()
            if negated:
                tok = self.consume()
            if tok.kind in _ORDER:
                right = self.unary()
                _check_orderable(left, tok.position)
                _check_orderable(right, tok.position)
                left = _order(tok.kind, left, right)
            elif tok.kind == "BETWEEN":
                low = self.unary()
                self.take("AND")
                high = self.unary()
                left = _between(left, low, high, negated, tok.position)
            else:  # IN
                self.take("(")
                values = [_string_value(self.take("STRING"))]
                while self.at(","):
                    self.consume()
                    values.append(_string_value(self.take("STRING")))
                self.take(")")
                if left.kind != "prop":
                    raise _runtime(f"Expected a property for In expression, got: {left.text}", tok.position)
                left = _in(left, values, negated)
        return left

    def unary(self) -> Node:
        kind = self.peek().kind
        if kind == "+":  # a syntactic lookahead: JavaCC never lists "+" as expected
            self.consume()
            return self.unary()
        if not self.at(*_UNARY_FIRST):
            raise self.syntax_error()
        if kind == "-":
            self.consume()
            return _negate(self.unary())
        if kind == "NOT":
            self.consume()
            at = self.peek().position
            return _not(self.as_boolean(self.unary(), at))
        return self.primary()

    def primary(self) -> Node:
        tok = self.consume()
        kind = tok.kind
        if kind == "(":
            inner = self.or_expr()
            self.take(")")
            return inner
        if kind == "ID":
            name = tok.text
            return Node("prop", lambda ctx: ctx.get(name), describe=name)
        return _literal(tok)


def _runtime(message: str, at: int) -> SelectorParseError:
    """A RuntimeException thrown by one of ComparisonExpression's factories while parsing."""
    return SelectorParseError(message, at, f"java.lang.RuntimeException: {message}")


def _string_value(tok: Token) -> str:
    return tok.text[1:-1].replace("''", "'")


def _literal(tok: Token) -> Node:
    kind, text = tok.kind, tok.text
    if kind == "STRING":
        return _const(_string_value(tok))
    if kind == "DECIMAL":  # ConstantExpression.createFromDecimal: a long only
        digits = text.rstrip("lL")
        if len(digits) > 19 or int(digits) > LONG_MAX:
            raise SelectorParseError(f"{text} is out of the range of a long", tok.position,
                                     f'java.lang.NumberFormatException: For input string: "{digits}"')
        return _const(int(digits))
    if kind == "FLOAT":  # ConstantExpression.createFloat: rejects above MAX_VALUE and below MIN_VALUE (0.0 too)
        d = float(text)
        if d > DOUBLE_MAX_VALUE:
            raise _runtime(f"{text} is greater than 1.7976931348623157E308", tok.position)
        if d < DOUBLE_MIN_VALUE:
            raise _runtime(f"{text} is less than 4.9E-324", tok.position)
        return _const(d)
    return _const({"TRUE": True, "FALSE": False, "NULL": None}[kind])


def _check_equal_operands(left: Node, right: Node, at: int) -> None:
    """checkEqualOperand and checkEqualOperandCompatability (4.9.8)."""
    for n in (left, right):
        if _is_const(n) and n.value is None:
            raise _runtime(f"'{n.text}' cannot be compared.", at)
    if _is_const(left) and _is_const(right) and _is_bool(left) and not _is_bool(right):
        raise _runtime(f"'{left.text}' cannot be compared with '{right.text}'", at)


def _check_orderable(n: Node, at: int) -> None:
    """checkLessThanOperand: only numbers (or what may evaluate to one) go into <, <=, >, >=."""
    if _is_const(n):
        if isinstance(n.value, (int, float)) and not isinstance(n.value, bool):
            return
        raise _runtime(f"Value '{n.text}' cannot be compared.", at)
    if _is_bool(n):
        raise _runtime(f"Value '{n.text}' cannot be compared.", at)


def _between(value: Node, low: Node, high: Node, negated: bool, at: int) -> Node:
    if negated:  # createNotBetween: value < low OR value > high, no check of the bounds' order
        for n in (value, low, value, high):
            _check_orderable(n, at)
        return _or(_order("<", value, low), _order(">", value, high))
    if _is_const(low) and _is_const(high):  # createBetween checks constant bounds first
        if low.value is None or high.value is None:
            raise _runtime("Illegal values of between, values can not be null!", at)
        try:
            wrong = java_compare(high.value, low.value) < 0
        except SelectorEvalError as exc:  # __compare wraps a NumberFormatException only
            java = f"{exc.java_class}: {exc}"
            if exc.java_class == "java.lang.NumberFormatException":
                java = f"java.lang.RuntimeException: {java}"
            raise SelectorParseError(f"Illegal values of between: {exc}", at, java) from None
        if wrong:
            raise _runtime(f"Illegal values of between, left value({java_object_str(low.value)}) must less than or "
                           f"equal to right value({java_object_str(high.value)})", at)
    for n in (value, low, value, high):
        _check_orderable(n, at)
    return _and(_order(">=", value, low), _order("<=", value, high))


# ---- the API ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Selector:
    """A compiled selector: ``evaluate`` gives 4.9.8's three-valued answer (or raises SelectorEvalError);
    ``matches`` is the broker's decision — True only, errors count as no match."""

    expression: str
    root: Node
    overflows: bool = field(default=False, compare=False)  # set by matches() on the first RecursionError

    def evaluate(self, properties: Context) -> Value:
        return self.root.evaluate(properties)

    def matches(self, properties: Context) -> bool:
        if self.overflows:
            return False
        try:
            return self.root.evaluate(properties) is True
        except (SelectorEvalError, ArithmeticError):
            return False
        except RecursionError:
            # A chain of thousands of ORs nests that deep; 4.9.8's evaluation then overflows its stack, which
            # ExpressionMessageFilter catches as no match too. Remembered: a chain's left spine is evaluated
            # first whatever the properties, so it overflows every time, and unwinding a thousand frames per
            # record made a pull over a queue of records cost seconds of the broker's loop (found by the fuzzer).
            object.__setattr__(self, "overflows", True)
            return False


def compile_selector(expression: str) -> Selector:
    """Parse ``expression``; SelectorParseError (with the offending position) if it is malformed."""
    if len(expression) > MAX_SELECTOR_CHARS:
        text = f"the selector is {len(expression)} characters long; this broker accepts at most {MAX_SELECTOR_CHARS}"
        raise SelectorParseError(text, MAX_SELECTOR_CHARS, text)
    result = _compile_cached(expression)
    if isinstance(result, SelectorParseError):
        raise SelectorParseError(result.message, result.position, result.java)
    return result


# SelectorParser.PARSE_CACHE: the last 100 selectors, failures included (a pull carrying its selector compiles
# it each time: the same malformed one sent in a flood is parsed once).
@functools.lru_cache(maxsize=100)
def _compile_cached(expression: str) -> Selector | SelectorParseError:
    try:
        return Selector(expression, _Parser(expression).selector())
    except SelectorParseError as exc:
        return exc
    except RecursionError:  # thousands of nested parentheses; 4.9.8's parser overflows its stack as well
        return SelectorParseError("the selector nests too deeply", 0, "java.lang.StackOverflowError")

