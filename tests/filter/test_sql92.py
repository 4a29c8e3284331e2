"""The SQL92 selector (reference_broker/filter/sql92.py): a table of answers observed from RocketMQ 4.9.8's own
filter module (tests/java/SqlEval.java over the distribution's rocketmq-filter-4.9.8.jar: "true", "false" and
"null" are the evaluated value, "PARSE" a rejected selector, "EVAL" an evaluation that throws — no match at the
broker), property-based tests against a reference evaluation written here independently, and a differential
run of random selectors through the real jar (skipped without java or the distribution)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_broker.filter.sql92 import SelectorEvalError, SelectorParseError, compile_selector

DRIVER = Path(__file__).resolve().parents[1] / "java" / "SqlEval.java"


def answer(expr: str, props: dict[str, str], messages: bool = False) -> str:
    try:
        sel = compile_selector(expr)
    except SelectorParseError as exc:
        return "PARSE " + json.dumps(exc.java, ensure_ascii=False, separators=(",", ":")) if messages else "PARSE"
    try:
        value = sel.evaluate(props)
    except SelectorEvalError:
        return "EVAL"
    return {True: "true", False: "false", None: "null"}[value]


# Observed on RocketMQ 4.9.8 (tests/java/SqlEval.java); each row: selector, message properties, answer.
OBSERVED_498 = [
    ('a = 3', {'a': '3'}, 'true'),
    ('a = 3', {'a': '3.0'}, 'EVAL'),
    ('a = 3.0', {'a': '3'}, 'true'),
    ('a > 5', {'a': '10.5'}, 'EVAL'),
    ('a > 5.0', {'a': '10.5'}, 'true'),
    ('a > 5', {'a': ' 10'}, 'EVAL'),
    ('a > 5.0', {'a': ' 10 '}, 'true'),
    ('a > 5', {'a': '+10'}, 'true'),
    ('a > 5', {'a': 'abc'}, 'EVAL'),
    ('a = 5', {'a': 'abc'}, 'EVAL'),
    ("a = 'abc'", {'a': 'abc'}, 'true'),
    ("a > 'x'", {'a': 'abc'}, 'PARSE'),
    ('a > b', {'a': '2', 'b': '10'}, 'false'),
    ('a > b', {'a': 'x', 'b': '10'}, 'EVAL'),
    ('a = b', {'a': '2', 'b': '2.0'}, 'false'),
    ('a = TRUE', {'a': 'TRUE'}, 'true'),
    ('a = TRUE', {'a': 'yes'}, 'false'),
    ('a = NULL', {}, 'PARSE'),
    ('a IS NULL', {}, 'true'),
    ('a IS NOT NULL', {}, 'false'),
    ("a = 'x'", {}, 'null'),
    ("'x' = a", {}, 'false'),
    ("a <> 'x'", {}, 'null'),
    ("'x' <> a", {}, 'true'),
    ('a > 1', {}, 'null'),
    ('1 < a', {}, 'null'),
    ('NOT a > 1', {}, 'PARSE'),
    ('a', {'a': 'true'}, 'false'),
    ('a', {}, 'null'),
    ('NOT a', {'a': 'true'}, 'true'),
    ('TRUE', {}, 'true'),
    ('1', {}, 'PARSE'),
    ("'a'", {}, 'PARSE'),
    ('a AND 1', {}, 'PARSE'),
    ("a IN ('x','y')", {'a': 'y'}, 'true'),
    ("a NOT IN ('x','y')", {}, 'null'),
    ("a NOT IN ('x','y')", {'a': 'z'}, 'true'),
    ("'a' IN ('a')", {}, 'PARSE'),
    ('a IN (1,2)', {'a': '1'}, 'PARSE'),
    ('a BETWEEN 1 AND 3', {'a': '2'}, 'true'),
    ('a BETWEEN 3 AND 1', {'a': '2'}, 'PARSE'),
    ('a NOT BETWEEN 1 AND 3', {'a': '5'}, 'true'),
    ('a NOT BETWEEN 1 AND 3', {}, 'null'),
    ('a BETWEEN 1 AND 3', {}, 'null'),
    ('a > -5', {'a': '-4'}, 'true'),
    ('-a > 5', {'a': '-6'}, 'null'),
    ('a > -b', {'a': '1', 'b': '2'}, 'null'),
    ("-'x' = a", {'a': 'x'}, 'null'),
    ('a = 9223372036854775807', {'a': '9223372036854775807'}, 'true'),
    ('a = 9223372036854775808', {}, 'PARSE'),
    ('a = 10L', {'a': '10'}, 'true'),
    ('a = 1e3', {'a': '1000'}, 'true'),
    ('a = .5', {'a': '0.5'}, 'true'),
    ('a = 5.', {'a': '5'}, 'true'),
    ("a > 1 OR a = 'x'", {'a': 'x'}, 'EVAL'),
    ("a = 'x' OR a > 1", {'a': 'x'}, 'true'),
    ("a = 'x' AND a > 1", {'a': 'y'}, 'false'),
    ("a > 1 AND a = 'x'", {'a': 'y'}, 'EVAL'),
    ("TRUE = 'a'", {}, 'PARSE'),
    ("'a' = TRUE", {}, 'false'),
    ('TRUE = FALSE', {}, 'false'),
    ("a = 'it''s'", {'a': "it's"}, 'true'),
    ('A = 1', {'a': '1'}, 'null'),
    ('a and b', {}, 'null'),
    ('a.b = 1', {}, 'PARSE'),
    ('a = 1 -- x', {'a': '1'}, 'true'),
    ('a = 1 /* c */', {'a': '1'}, 'true'),
    ('a = 1e3', {'a': '1e3'}, 'true'),
    ('a > 1.5', {'a': 'NaN'}, 'true'),
    ('a > 1.5', {'a': '2f'}, 'true'),
    ('a > 1', {'a': '2L'}, 'EVAL'),
    ('a = 1', {'a': '01'}, 'true'),
    ('a > 1.0', {'a': '0x10p0'}, 'true'),
    ('TRUE = a', {'a': 'true'}, 'EVAL'),
    ('FALSE = a', {}, 'false'),
    ('a = FALSE', {}, 'null'),
    ('a = 1', {'a': '1.0'}, 'EVAL'),
    ('a = 1.5', {'a': 'NaN'}, 'false'),
    ('a = 0.0', {'a': '-0.0'}, 'PARSE'),
    ('a = 0', {'a': '-0'}, 'true'),
    ('a >= 1.5', {'a': 'Infinity'}, 'true'),
    ('a < 1.5', {'a': '-Infinity'}, 'true'),
    ('a = 1', {'a': '١'}, 'true'),
    ('a = 1.0', {'a': '1d'}, 'true'),
    ('1 = 1.0', {}, 'true'),
    ('1 > 0.5', {}, 'true'),
    ("'1' = 1", {}, 'true'),
    ("1 = '1'", {}, 'true'),
    ("1.0 = '1'", {}, 'true'),
    ("'x' = 1", {}, 'EVAL'),
    ("a = ''", {'a': ''}, 'true'),
    ('a = 1', {'a': ''}, 'EVAL'),
    ('a > 1.0', {'a': ''}, 'EVAL'),
    ('a IS NULL OR a > 1', {}, 'true'),
    ('a > 1 OR a IS NULL', {}, 'true'),
    ('a > 1 OR a < 0', {}, 'null'),
    ('a > 1 OR TRUE', {}, 'true'),
    ('a > 1 AND FALSE', {}, 'false'),
    ('NOT NOT a = 1', {'a': '1'}, 'false'),
    ('NOT (a = 1)', {}, 'null'),
    ("a BETWEEN 1 AND 'x'", {}, 'PARSE'),
    ('a BETWEEN b AND c', {'a': '2', 'b': '1', 'c': '3'}, 'true'),
    ('a BETWEEN 1.5 AND 2', {'a': '2'}, 'true'),
    ('a BETWEEN 2 AND 2', {'a': '2'}, 'true'),
    ('a NOT BETWEEN 3 AND 1', {'a': '2'}, 'true'),
    ('TRUE AND TRUE', {}, 'true'),
    ('(TRUE)', {}, 'true'),
    ('(a)', {}, 'null'),
    ('((a = 1))', {'a': '1'}, 'true'),
    ('a = 1 AND', {}, 'PARSE'),
    ('a IN ()', {}, 'PARSE'),
    ("a IN ('x', )", {}, 'PARSE'),
    ("a in ('x') and b is not null", {'a': 'x', 'b': ''}, 'true'),
    ('a = 1 a', {}, 'null'),
    ('', {}, 'PARSE'),
    ('a = -1', {'a': '-1'}, 'true'),
    ('a = - 1', {'a': '-1'}, 'true'),
    ('a = +1', {'a': '1'}, 'true'),
    ('a = -1.5', {'a': '-1.5'}, 'true'),
    ('a = --1', {'a': '1'}, 'true'),
    ("a = -'x'", {'a': 'x'}, 'false'),
    ("a > -'x'", {'a': 'x'}, 'null'),
    ('a = -TRUE', {'a': 'x'}, 'false'),
    ('a = -9223372036854775807', {'a': '-9223372036854775807'}, 'true'),
    ('-a IS NULL', {'a': '1'}, 'true'),
    ('a = 1 = TRUE', {'a': '1'}, 'true'),
    ('a = b = c', {'a': '1'}, 'false'),
    ('a > 1 > 2', {'a': '1'}, 'PARSE'),
    ('TRUE > 1', {}, 'PARSE'),
    ('a IS NULL IS NULL', {}, 'false'),
    ('$x_1 = 1', {'$x_1': '1'}, 'true'),
    ('_ = 1', {'_': '1'}, 'true'),
    ("a IN ('x') IN ('y')", {}, 'PARSE'),
    ('a = 0L', {}, 'null'),
    ('a = 5e', {}, 'null'),
    ('a = 5E+2', {'a': '500'}, 'true'),
    ('a = 5.e-1', {'a': '0.5'}, 'true'),
    ('a = 1', {'a': '1_0'}, 'EVAL'),
    ('a >= 2.0', {'a': '0x1P+1'}, 'true'),
    ('a = 1.0', {'a': ' 1.0\n'}, 'true'),
    ('a = 0.0', {'a': '0'}, 'PARSE'),
    ('a = 0.5', {'a': '0.5'}, 'true'),
    ('a = 10.0', {'a': '10'}, 'true'),
    ('a = 0.0', {}, 'PARSE'),
    ('a = 1.0', {}, 'null'),
    ('a = 0.', {}, 'PARSE'),
    ('a > 0.0', {'a': '1'}, 'PARSE'),
    ('a = 0e1', {}, 'PARSE'),
    ('NULL', {}, 'null'),
    ('NOT NULL', {}, 'null'),
    ('NULL IS NULL', {}, 'true'),
    ('a = 1 OR NULL', {}, 'null'),
    ('a BETWEEN NULL AND 1', {}, 'PARSE'),
    ('a > NULL', {}, 'PARSE'),
    ('TRUE = 1', {}, 'PARSE'),
    ('1 = TRUE', {}, 'false'),
    ('(a = 1) = b', {'a': '1', 'b': 'true'}, 'EVAL'),
    ('(a = 1) = 1', {'a': '1'}, 'false'),
    ('(a = 1) = 1.0', {'a': '1'}, 'false'),
    ('a = 1 #', {}, 'PARSE'),
    ('a = 1 a #', {}, 'null'),
    ("a = 'abc", {}, 'PARSE'),
    ("a = 1 'abc", {}, 'PARSE'),
    ('a = 1.1', {'a': '1.1f'}, 'true'),
    ('a > 1', {'a': '9223372036854775808'}, 'EVAL'),
    ('a > 1.0', {'a': '1e999'}, 'true'),
    ('a BETWEEN -5 AND -10', {'a': '1'}, 'false'),
    ('a BETWEEN 1 AND 1.5', {'a': '1'}, 'true'),
    ("a = 'é'", {'a': 'é'}, 'true'),
    ('é = 1', {}, 'PARSE'),
    ('NOTE = 1', {'NOTE': '1'}, 'true'),
    ("a IN ('x','x')", {'a': 'x'}, 'true'),
    ("a NOT IN ('x')", {'a': 'x'}, 'false'),
    ('a = 1.0', {'a': '0X1.8P0'}, 'false'),
    ('a = 1.5', {'a': '0X1.8P0'}, 'true'),
    ('a > 1.0', {'a': '1.5D'}, 'true'),
    ('a > 1.0', {'a': '+.5e1'}, 'true'),
    ('a > 1.0', {'a': '5.'}, 'true'),
    ('a > 1.0', {'a': '.'}, 'EVAL'),
    ('a > 1.0', {'a': 'infinity'}, 'EVAL'),
    ('a > 1.0', {'a': '-NaN'}, 'true'),
    ('a = 1.0', {'a': '\x0b1\x01'}, 'true'),
    ('a = 1e999', {}, 'PARSE'),
    ('a = 1e-400', {}, 'PARSE'),
    ('a = 4.9e-324', {'a': '4.9e-324'}, 'true'),
    ('a = /* x */ 1', {'a': '1'}, 'true'),
    ('a = /* x 1', {'a': '1'}, 'PARSE'),
    ('a = 1 /', {}, 'PARSE'),
    ('a = 1 OR', {}, 'PARSE'),
    ("a IN ('x') OR b = ''", {'b': ''}, 'true'),
    ('a = 1L', {'a': '1'}, 'true'),
    ('a > 1', {'a': '٣'}, 'true'),
    ('a > 1.0', {'a': '٣'}, 'EVAL'),
    ("a = 'x'", {'a': 'X'}, 'false'),
    ("a <> 'x'", {'a': 'y'}, 'true'),
]


@pytest.mark.parametrize(("expr", "props", "expected"), OBSERVED_498)
def test_answers_as_rocketmq_498_does(expr: str, props: dict[str, str], expected: str) -> None:
    assert answer(expr, props) == expected


# What 4.9.8 says of a malformed selector (CHECK_CLIENT_CONFIG's remark; tests/java/SqlEval.java messages).
PARSE_EXC = "org.apache.rocketmq.filter.parser.ParseException: "
LEXICAL = "org.apache.rocketmq.filter.parser.TokenMgrError: Lexical error at "
RUNTIME = "java.lang.RuntimeException: "
NUMBER = "java.lang.NumberFormatException: "
EXPECT_UNARY = ("Was expecting one of:\n    \"NOT\" ...\n    \"TRUE\" ...\n    \"FALSE\" ...\n    \"NULL\" ...\n    "
                "<DECIMAL_LITERAL> ...\n    <FLOATING_POINT_LITERAL> ...\n    <STRING_LITERAL> ...\n    <ID> ...\n    "
                "\"(\" ...\n    \"-\" ...\n    ")
OBSERVED_REMARKS_498 = [
    ('a >',
     PARSE_EXC + 'Encountered "<EOF>" at line 1, column 3.\n' + EXPECT_UNARY),
    ("a > 'x'",
     RUNTIME + "Value ''x'' cannot be compared."),
    ('a = #',
     LEXICAL + 'line 1, column 6.  Encountered: <EOF> after : ""'),
    ('a = # b',
     LEXICAL + 'line 1, column 5.  Encountered: "#" (35), after : ""'),
    ("a = 'abc",
     LEXICAL + 'line 1, column 9.  Encountered: <EOF> after : "\\\'abc"'),
    ('a = 99999999999999999999',
     NUMBER + 'For input string: "99999999999999999999"'),
    ('a = 99999999999999999999L',
     NUMBER + 'For input string: "99999999999999999999"'),
    ("TRUE = 'a'",
     RUNTIME + "'TRUE' cannot be compared with ''a''"),
    ('a BETWEEN 3 AND 1',
     RUNTIME + 'Illegal values of between, left value(3) must less than or equal to right value(1)'),
    ('a BETWEEN 3.5 AND 1.25',
     RUNTIME + 'Illegal values of between, left value(3.5) must less than or equal to right value(1.25)'),
    ('a BETWEEN 1e10 AND 1',
     RUNTIME + 'Illegal values of between, left value(1.0E10) must less than or equal to right value(1)'),
    ('1',
     PARSE_EXC + 'Expression will not result in a boolean value: 1'),
    ("'x'",
     PARSE_EXC + "Expression will not result in a boolean value: 'x'"),
    ('a AND 1',
     PARSE_EXC + 'Expression will not result in a boolean value: 1'),
    ('a AND -b',
     PARSE_EXC + 'Expression will not result in a boolean value: (- b)'),
    ("a AND 'it''s'",
     PARSE_EXC + "Expression will not result in a boolean value: 'it''s'"),
    ('a OR 2.5',
     PARSE_EXC + 'Expression will not result in a boolean value: 2.5'),
    ('(a = 1',
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 6.\n'
      'Was expecting one of:\n'
      '    "NOT" ...\n'
      '    "AND" ...\n'
      '    "OR" ...\n'
      '    "BETWEEN" ...\n'
      '    "IN" ...\n'
      '    "IS" ...\n'
      '    "=" ...\n'
      '    "<>" ...\n'
      '    ">" ...\n'
      '    ">=" ...\n'
      '    "<" ...\n'
      '    "<=" ...\n'
      '    ")" ...\n'
      '    ')),
    ('a IN (1)',
     PARSE_EXC + ('Encountered " <DECIMAL_LITERAL> "1 "" at line 1, column 7.\n'
      'Was expecting:\n'
      '    <STRING_LITERAL> ...\n'
      '    ')),
    ('a = 0.0',
     RUNTIME + '0.0 is less than 4.9E-324'),
    ('a = 1e999',
     RUNTIME + '1e999 is greater than 1.7976931348623157E308'),
    ('a = NULL',
     RUNTIME + "'NULL' cannot be compared."),
    ('NULL = a',
     RUNTIME + "'NULL' cannot be compared."),
    ("'a' IN ('a')",
     RUNTIME + "Expected a property for In expression, got: 'a'"),
    ("1 IN ('a')",
     RUNTIME + 'Expected a property for In expression, got: 1'),
    ('a = 1 AND',
     PARSE_EXC + 'Encountered "<EOF>" at line 1, column 9.\n' + EXPECT_UNARY),
    ('\n  a > ',
     PARSE_EXC + 'Encountered "<EOF>" at line 2, column 6.\n' + EXPECT_UNARY),
    ('a >\n b\n >',
     PARSE_EXC + 'Encountered "<EOF>" at line 3, column 2.\n' + EXPECT_UNARY),
    ('a\t= #',
     LEXICAL + 'line 1, column 12.  Encountered: <EOF> after : ""'),
    ('é = 1',
     LEXICAL + 'line 1, column 1.  Encountered: "\\u00e9" (233), after : ""'),
    ('',
     PARSE_EXC + 'Encountered "<EOF>" at line 0, column 0.\n' + EXPECT_UNARY),
    ('   ',
     PARSE_EXC + 'Encountered "<EOF>" at line 1, column 3.\n' + EXPECT_UNARY),
    ('a = /* x 1',
     LEXICAL + 'line 1, column 11.  Encountered: <EOF> after : "/* x 1"'),
    ('a = 1 / x',
     LEXICAL + 'line 1, column 8.  Encountered: " " (32), after : "/"'),
    ('a = 1 /',
     LEXICAL + 'line 1, column 8.  Encountered: <EOF> after : ""'),
    ('a IS',
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 4.\n'
      'Was expecting:\n'
      '    "NOT" ...\n'
      '    ')),
    ('a IS NOT',
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 8.\n'
      'Was expecting:\n'
      '    "NULL" ...\n'
      '    ')),
    ('a IS NOT 1',
     PARSE_EXC + ('Encountered " <DECIMAL_LITERAL> "1 "" at line 1, column 10.\n'
      'Was expecting:\n'
      '    "NULL" ...\n'
      '    ')),
    ('a NOT',
     PARSE_EXC + ('Encountered " "NOT" "NOT "" at line 1, column 3.\n'
      'Was expecting one of:\n'
      '    "BETWEEN" ...\n'
      '    "IN" ...\n'
      '    ">" ...\n'
      '    ">=" ...\n'
      '    "<" ...\n'
      '    "<=" ...\n'
      '    ')),
    ('a NOT x',
     PARSE_EXC + ('Encountered " "NOT" "NOT "" at line 1, column 3.\n'
      'Was expecting one of:\n'
      '    "BETWEEN" ...\n'
      '    "IN" ...\n'
      '    ">" ...\n'
      '    ">=" ...\n'
      '    "<" ...\n'
      '    "<=" ...\n'
      '    ')),
    ('a IN',
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 4.\n'
      'Was expecting:\n'
      '    "(" ...\n'
      '    ')),
    ('a IN (',
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 6.\n'
      'Was expecting:\n'
      '    <STRING_LITERAL> ...\n'
      '    ')),
    ("a IN ('x'",
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 9.\n'
      'Was expecting one of:\n'
      '    "," ...\n'
      '    ")" ...\n'
      '    ')),
    ("a IN ('x' 'y')",
     PARSE_EXC + ('Encountered " <STRING_LITERAL> "\\\'y\\\' "" at line 1, column 11.\n'
      'Was expecting one of:\n'
      '    "," ...\n'
      '    ")" ...\n'
      '    ')),
    ('a BETWEEN 1',
     PARSE_EXC + ('Encountered "<EOF>" at line 1, column 11.\n'
      'Was expecting:\n'
      '    "AND" ...\n'
      '    ')),
    ('a BETWEEN 1 OR 2',
     PARSE_EXC + ('Encountered " "OR" "OR "" at line 1, column 13.\n'
      'Was expecting:\n'
      '    "AND" ...\n'
      '    ')),
    (')',
     PARSE_EXC + 'Encountered " ")" ") "" at line 1, column 1.\n' + EXPECT_UNARY),
    ('a = )',
     PARSE_EXC + 'Encountered " ")" ") "" at line 1, column 5.\n' + EXPECT_UNARY),
    ('a > TRUE',
     RUNTIME + "Value 'TRUE' cannot be compared."),
    ('TRUE > a',
     RUNTIME + "Value 'TRUE' cannot be compared."),
    ('a > NULL',
     RUNTIME + "Value 'NULL' cannot be compared."),
    ('a BETWEEN NULL AND 1',
     RUNTIME + 'Illegal values of between, values can not be null!'),
    ("a BETWEEN 'a' AND 'b'",
     RUNTIME + "Value ''a'' cannot be compared."),
    ("a NOT BETWEEN 'a' AND 2",
     RUNTIME + "Value ''a'' cannot be compared."),
    ('a > 1 > 2',
     RUNTIME + "Value '(a > 1)' cannot be compared."),
    ('NOT 1',
     PARSE_EXC + 'Expression will not result in a boolean value: 1'),
    ("NOT 'x'",
     PARSE_EXC + "Expression will not result in a boolean value: 'x'"),
    ('a = b AND 5',
     PARSE_EXC + 'Expression will not result in a boolean value: 5'),
    ("- 'x'",
     PARSE_EXC + "Expression will not result in a boolean value: (- 'x')"),
    ('TRUE = 1',
     RUNTIME + "'TRUE' cannot be compared with '1'"),
    ('FALSE = 1.5',
     RUNTIME + "'FALSE' cannot be compared with '1.5'"),
    ('a = 1 OR',
     PARSE_EXC + 'Encountered "<EOF>" at line 1, column 8.\n' + EXPECT_UNARY),
    ('==',
     PARSE_EXC + 'Encountered " "=" "= "" at line 1, column 1.\n' + EXPECT_UNARY),
    ('a == 1',
     PARSE_EXC + 'Encountered " "=" "= "" at line 1, column 4.\n' + EXPECT_UNARY),
    ('a != 1',
     LEXICAL + 'line 1, column 3.  Encountered: "!" (33), after : ""'),
    ('a = 1 ; b',
     LEXICAL + 'line 1, column 7.  Encountered: ";" (59), after : ""'),
    ('a = 1\r\n#',
     LEXICAL + 'line 2, column 2.  Encountered: <EOF> after : ""'),
]


@pytest.mark.parametrize(("expr", "remark"), OBSERVED_REMARKS_498)
def test_a_malformed_selector_is_described_as_rocketmq_498_describes_it(expr: str, remark: str) -> None:
    with pytest.raises(SelectorParseError) as err:
        compile_selector(expr)
    assert err.value.java == remark


@pytest.mark.parametrize(("expr", "column"), [
    ("a = 1 AND", 10), ("a >", 4), ("a = #", 5), ("a IN ()", 7), ("a > 'x'", 3), ("", 1), ("a = 'abc", 5),
    ("TRUE = 'a'", 6), ("a = 99999999999999999999", 5), ("(a = 1", 7)])
def test_a_malformed_selector_names_the_column(expr: str, column: int) -> None:
    with pytest.raises(SelectorParseError) as err:
        compile_selector(expr)
    assert err.value.position == column - 1
    assert f"at column {column}" in str(err.value)


def test_matches_is_true_only_and_an_evaluation_error_is_no_match() -> None:
    sel = compile_selector("a > 5")
    assert sel.matches({"a": "6"}) is True
    assert sel.matches({"a": "5"}) is False
    assert sel.matches({}) is False  # null
    assert sel.matches({"a": "5.5"}) is False  # Long.valueOf("5.5") throws in 4.9.8
    with pytest.raises(SelectorEvalError):
        sel.evaluate({"a": "5.5"})


def test_hostile_sizes_are_parse_errors_or_no_match_never_other_exceptions() -> None:
    with pytest.raises(SelectorParseError) as err:
        compile_selector("(" * 1500 + "a = 1" + ")" * 1500)
    assert err.value.java == "java.lang.StackOverflowError"
    with pytest.raises(SelectorParseError) as err:
        compile_selector("a = " + "9" * 5000)  # past Python's int-from-string limit too
    assert err.value.java.startswith("java.lang.NumberFormatException")
    chain = compile_selector(" OR ".join(["a = 'x'"] * 1200) + " OR a = 'y'")
    assert chain.matches({"a": "y"}) is False  # too deep to evaluate: no match, as 4.9.8's stack overflow
    assert compile_selector("a > 1").matches({"a": "9" * 5000}) is False
    with pytest.raises(SelectorParseError) as err:
        compile_selector("a = 1 OR " * 2000 + "a = 2")  # our bound on the length (4.9.8 has none)
    assert "at most 16384" in err.value.java


# ---- property-based: generated selectors against a reference evaluation written independently ------------

PROPS = ("a", "b", "c")
PROP_VALUES = ("1", "2", "10", "-3", "2.5", "abc", "", "true", "x")


@dataclass(frozen=True)
class Lit:
    value: object  # int (long), float (double), str, bool

    def text(self) -> str:
        v = self.value
        if isinstance(v, bool):
            return "TRUE" if v else "FALSE"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        if isinstance(v, float):
            return repr(v) if v > 0 else f"-{-v!r}"
        return str(v)


@dataclass(frozen=True)
class Prop:
    name: str

    def text(self) -> str:
        return self.name


@dataclass(frozen=True)
class Op:
    op: str
    args: tuple[object, ...]


def _num(v: str | int | float, as_long: bool) -> int | float:
    """Long.valueOf / Double.valueOf for the generated values (digits, sign, one dot: no Java corner cases)."""
    if isinstance(v, (int, float)):
        return v
    try:
        return int(v) if as_long else float(v)
    except ValueError:
        raise SelectorEvalError(v) from None


def ref_eq(lv: object, rv: object) -> bool | None:
    if lv is None:
        return True if rv is None else None
    if rv is None:
        return False
    if isinstance(lv, bool) or isinstance(rv, bool):
        if isinstance(lv, bool) and isinstance(rv, bool):
            return lv == rv
        if isinstance(lv, str):
            return (lv.lower() == "true") == rv
        if isinstance(rv, str):
            raise SelectorEvalError("Boolean cast to String")
        return False
    if isinstance(lv, str) and isinstance(rv, str):
        return lv == rv
    if isinstance(lv, str):
        return _num(lv, isinstance(rv, int)) == rv
    if isinstance(rv, str):
        return lv == _num(rv, isinstance(lv, int))
    return lv == rv


def ref_order(op: str, lv: object, rv: object) -> bool | None:
    if lv is None or rv is None:
        return None
    if isinstance(lv, str) and isinstance(rv, str):
        lv, rv = _num(lv, False), _num(rv, False)
    elif isinstance(lv, str):
        lv = _num(lv, isinstance(rv, int))
    elif isinstance(rv, str):
        rv = _num(rv, isinstance(lv, int))
    return {"<": lv < rv, "<=": lv <= rv, ">": lv > rv, ">=": lv >= rv}[op]  # type: ignore[operator]


def ref_eval(node: object, props: dict[str, str]) -> object:
    if isinstance(node, Lit):
        return node.value
    if isinstance(node, Prop):
        return props.get(node.name)
    assert isinstance(node, Op)
    op, args = node.op, node.args
    if op == "AND":
        left = ref_eval(args[0], props)
        if left is False:
            return False
        right = ref_eval(args[1], props)
        return False if right is False else (None if None in (left, right) else True)
    if op == "OR":
        left = ref_eval(args[0], props)
        if left is True:
            return True
        right = ref_eval(args[1], props)
        return True if right is True else (None if None in (left, right) else False)
    if op == "NOT":
        v = ref_eval(args[0], props)
        return None if v is None else not v
    if op in ("=", "<>"):
        v = ref_eq(ref_eval(args[0], props), ref_eval(args[1], props))
        return v if op == "=" or v is None else not v
    if op in ("<", "<=", ">", ">="):
        left = ref_eval(args[0], props)
        return None if left is None else ref_order(op, left, ref_eval(args[1], props))
    if op in ("IS NULL", "IS NOT NULL"):
        missing = ref_eval(args[0], props) is None
        return missing if op == "IS NULL" else not missing
    if op in ("IN", "NOT IN"):
        v = ref_eval(args[0], props)
        if v is None:
            return None
        return (v in args[1]) == (op == "IN")  # type: ignore[operator]
    if op == "BETWEEN":
        return ref_eval(Op("AND", (Op(">=", (args[0], args[1])), Op("<=", (args[0], args[2])))), props)
    assert op == "NOT BETWEEN"
    return ref_eval(Op("OR", (Op("<", (args[0], args[1])), Op(">", (args[0], args[2])))), props)


def render(node: object) -> str:
    if isinstance(node, (Lit, Prop)):
        return node.text()
    assert isinstance(node, Op)
    a = node.args
    if node.op in ("AND", "OR", "=", "<>", "<", "<=", ">", ">="):
        return f"({render(a[0])}) {node.op} ({render(a[1])})" if node.op in ("AND", "OR") else \
            f"{render(a[0])} {node.op} {render(a[1])}"
    if node.op == "NOT":
        return f"NOT ({render(a[0])})"
    if node.op in ("IS NULL", "IS NOT NULL"):
        return f"{render(a[0])} {node.op}"
    if node.op in ("IN", "NOT IN"):
        return f"{render(a[0])} {node.op} (" + ", ".join("'" + s.replace("'", "''") + "'" for s in a[1]) + ")"
    return f"{render(a[0])} {node.op} {render(a[1])} AND {render(a[2])}"


props_st = st.sampled_from(PROPS).map(Prop)
longs = st.integers(-20, 20).map(Lit)
doubles = st.sampled_from([0.5, 1.5, 2.5, -2.5, 10.0, 3.0]).map(Lit)
numbers = st.one_of(longs, doubles)
strings = st.sampled_from((*PROP_VALUES, "it's")).map(Lit)


@st.composite
def between(draw: st.DrawFn) -> Op:
    lo, hi = sorted([draw(st.integers(-5, 15)), draw(st.integers(-5, 15))])
    return Op(draw(st.sampled_from(["BETWEEN", "NOT BETWEEN"])), (draw(props_st), Lit(lo), Lit(hi)))


leaves = st.one_of(
    st.builds(lambda o, p, n: Op(o, (p, n)), st.sampled_from(["<", "<=", ">", ">="]), props_st, numbers),
    st.builds(lambda o, p, n: Op(o, (n, p)), st.sampled_from(["<", "<=", ">", ">="]), props_st, numbers),
    st.builds(lambda o, p, q: Op(o, (p, q)), st.sampled_from(["<", ">="]), props_st, props_st),
    st.builds(lambda o, p, v: Op(o, (p, v)), st.sampled_from(["=", "<>"]), props_st,
              st.one_of(numbers, strings, st.booleans().map(Lit), props_st)),
    st.builds(lambda o, p, v: Op(o, (v, p)), st.sampled_from(["=", "<>"]), props_st, st.one_of(numbers, strings)),
    st.builds(lambda o, p: Op(o, (p,)), st.sampled_from(["IS NULL", "IS NOT NULL"]), props_st),
    st.builds(lambda o, p, vs: Op(o, (p, frozenset(vs))), st.sampled_from(["IN", "NOT IN"]), props_st,
              st.lists(st.sampled_from(PROP_VALUES), min_size=1, max_size=3)),
    between(),
    st.booleans().map(Lit),
)
selectors = st.recursive(leaves, lambda inner: st.one_of(
    st.builds(lambda o, a, b: Op(o, (a, b)), st.sampled_from(["AND", "OR"]), inner, inner),
    inner.map(lambda a: Op("NOT", (a,)))), max_leaves=8)
messages = st.dictionaries(st.sampled_from(PROPS), st.sampled_from(PROP_VALUES), max_size=3)


def _ref_answer(node: object, props: dict[str, str]) -> str:
    try:
        value = ref_eval(node, props)
    except SelectorEvalError:
        return "EVAL"
    return {True: "true", False: "false", None: "null"}[value]  # type: ignore[index]


@settings(max_examples=400, deadline=None)
@given(selectors, messages)
def test_generated_selectors_agree_with_the_reference_evaluation(node: object, props: dict[str, str]) -> None:
    assert answer(render(node), props) == _ref_answer(node, props)


@settings(max_examples=200, deadline=None)
@given(selectors, st.integers(0, 40), st.text("ab=<>()' -.1eNOT", max_size=6))
def test_garbage_never_escapes_as_anything_but_a_parse_error(node: object, cut: int, junk: str) -> None:
    text = render(node)
    mangled = text[:cut] + junk + text[cut:]
    try:
        compile_selector(mangled).matches({"a": "1", "b": "x"})
    except SelectorParseError as exc:
        assert 0 <= exc.position <= len(mangled)


# ---- differential: random selectors through RocketMQ 4.9.8's own filter module ------------------------------

def _random_selector(rng: random.Random) -> str:
    """Token soup biased towards valid selectors, so parse errors, evaluation errors and values all occur."""
    atoms = ["a", "b", "c", "TAGS", "1", "2", "10", "-3", "2.5", "0.5", "'x'", "'1'", "'abc'", "''", "TRUE",
             "FALSE", "NULL", "1e1", "3L"]
    ops = ["=", "<>", ">", ">=", "<", "<="]

    def cond(depth: int) -> str:
        r = rng.random()
        if depth > 2 or r < 0.4:
            kind = rng.randrange(5)
            if kind == 0:
                return f"{rng.choice(atoms)} {rng.choice(ops)} {rng.choice(atoms)}"
            if kind == 1:
                return f"{rng.choice(atoms)} IS {rng.choice(['', 'NOT '])}NULL"
            if kind == 2:
                vals = ", ".join(rng.choice(["'x'", "'1'", "'abc'", "''"]) for _ in range(rng.randint(1, 3)))
                return f"{rng.choice(atoms)} {rng.choice(['', 'NOT '])}IN ({vals})"
            if kind == 3:
                return f"{rng.choice(atoms)} {rng.choice(['', 'NOT '])}BETWEEN {rng.choice(atoms)} AND " \
                       f"{rng.choice(atoms)}"
            return rng.choice(atoms)
        if r < 0.55:
            return f"NOT {cond(depth + 1)}"
        if r < 0.7:
            return f"({cond(depth + 1)})"
        return f"{cond(depth + 1)} {rng.choice(['AND', 'OR'])} {cond(depth + 1)}"
    return cond(0)


def test_random_selectors_answer_as_rocketmq_498_filter_module(rocketmq_home: Path) -> None:
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (Debian: openjdk-17-jdk-headless)")
    rng = random.Random(19)
    values = ["1", "2", "10", "-3", "2.5", "abc", "", "x", "true", " 1"]
    cases = []
    for _ in range(1500):
        props = {k: rng.choice(values) for k in ("a", "b", "c", "TAGS") if rng.random() < 0.7}
        cases.append((_random_selector(rng), props))
    lines = "".join(json.dumps({"expr": e, "props": p}) + "\n" for e, p in cases)
    done = subprocess.run(["java", "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", f"{rocketmq_home}/lib/*",
                           str(DRIVER), "messages"], input=lines, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    theirs = done.stdout.split("\n")[:len(cases)]
    # fastjson and json write the same JSON string for these texts: the remarks compare as written.
    diffs = [(e, p, t, answer(e, p, True)) for (e, p), t in zip(cases, theirs, strict=True)
             if answer(e, p, True) != t]
    assert not diffs, diffs[:10]
    kinds = {t.split(" ")[0] for t in theirs}
    assert {"true", "false", "null", "PARSE", "EVAL"} <= kinds  # the run covered every kind of answer


def test_an_overflowing_chain_is_no_match_and_is_not_evaluated_again():
    """A chain of thousands of ORs overflows the evaluation's stack (as 4.9.8's does): no match, and the
    selector remembers it, so a pull does not unwind a thousand frames per record."""
    sel = compile_selector(" OR ".join(["a = '1'"] * 1400))  # 15 KiB
    assert not sel.overflows
    assert sel.matches({"a": "1"}) is False
    assert sel.overflows
    assert sel.matches({"a": "1"}) is False and sel.matches({}) is False
