"""The check machinery itself: type validation, learner errors as feedback, messages, the registry."""

import ast
import re
from pathlib import Path

import pytest
import torch

from transformer_course.checks import REGISTRY, CheckFailed, check, core
from transformer_course.checks.core import Case, Mistake, check_function, compare


class AlwaysEqual:
    """An answer that claims to equal anything: it must never pass."""

    def __eq__(self, other):
        return True

    def __index__(self):
        return 0


class SneakyTensor(torch.Tensor):
    """A tensor subclass whose comparisons always succeed."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.Tensor.__ne__, torch.Tensor.__eq__, torch.allclose):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


@pytest.mark.parametrize(
    "exercise_id, answer",
    [
        ("01.1", lambda *a: AlwaysEqual()),
        ("01.1", lambda t, E, W, b: (E[t] @ W.T).as_subclass(SneakyTensor)),
        ("01.2", lambda t: AlwaysEqual()),
        ("01.2", lambda t: (AlwaysEqual(), AlwaysEqual())),
        ("01.3", lambda v, d, tie: AlwaysEqual()),
        ("01.3", lambda v, d, tie: True),
    ],
)
def test_objects_that_claim_equality_fail(exercise_id, answer):
    with pytest.raises(CheckFailed, match=r"expected (a torch.Tensor|a tuple .*|an integer), got"):
        check(exercise_id, answer)


def test_learner_exception_becomes_feedback_with_its_line():
    def token_logits(tokens, embedding, head_weight, head_bias):
        x = embedding[tokens]
        return x @ head_weight[:2]  # shape error inside the learner's code

    with pytest.raises(CheckFailed) as failure:
        check("01.1", token_logits)
    message = str(failure.value)
    assert "your code raised RuntimeError" in message
    assert "in token_logits: return x @ head_weight[:2]" in message
    assert failure.value.__cause__ is None and failure.value.__suppress_context__


def test_stub_says_not_implemented():
    def next_token_pairs(tokens):
        raise NotImplementedError("01.2: replace this line with your code")

    with pytest.raises(CheckFailed, match=r"next_token_pairs is not implemented yet"):
        check("01.2", next_token_pairs)


@pytest.mark.parametrize("answer", [None, 3, "tokens[..., 1:]"])
def test_non_callable_answer(answer):
    with pytest.raises(CheckFailed, match="expected a function, got"):
        check("01.2", answer)


def test_unknown_exercise_id_lists_known_ones():
    with pytest.raises(CheckFailed, match=r"unknown exercise id '99.9'; known ids: .*01\.1"):
        check("99.9", lambda: None)


def test_answer_that_edits_its_input_in_place_cannot_spoil_the_reference():
    def next_token_pairs(tokens):
        pairs = tokens[..., :-1].clone(), tokens[..., 1:].clone()
        tokens.zero_()
        return pairs

    check("01.2", next_token_pairs)


def test_pass_message_says_public_checks(capsys):
    check("01.2", lambda t: (t[..., :-1], t[..., 1:]))
    assert re.fullmatch(r"\u2714 01\.2 .*: public checks passed \(\d+ cases\)\.\n", capsys.readouterr().out)


def test_failure_message_shows_case_shapes_and_one_wrong_row():
    with pytest.raises(CheckFailed) as failure:
        check("01.1", lambda t, E, W, b: E[t] @ W.T + 2 * b)
    message = str(failure.value)
    assert "[tokens (2, 3), embedding (5, 5), head_weight (5, 5), head_bias (5,)]" in message
    assert "max abs error" in message and "row [0, 0]" in message
    assert "expected [" in message and "got      [" in message
    assert "Likely mistake" not in message  # no known mistake matches: none is invented
    assert failure.value.mistake is None


def test_nan_is_reported_where_it_appears():
    expected = torch.zeros(2, 3)
    got = expected.clone()
    got[1, 2] = float("nan")
    assert compare(expected, got) == "output: got NaN at index (1, 2) where 0 was expected"


def test_the_first_failing_case_is_reported_with_the_mistake_that_explains_every_failing_case():
    cases = [Case("small", {"x": torch.arange(3.0)}), Case("big", {"x": torch.arange(5.0)})]
    mistakes = [Mistake("doubled", "doubled", lambda x: 2 * x), Mistake("negated", "negated", lambda x: -x)]
    named = r"wrong result for small \[x \(3,\)\][\s\S]*Likely mistake: negated"
    with pytest.raises(CheckFailed, match=named) as caught:
        check_function(lambda x: -x, lambda x: x, cases, mistakes)
    assert caught.value.mistake is mistakes[1] and str(caught.value).endswith("\nLikely mistake: negated")
    assert check_function(lambda x: x + 0, lambda x: x, cases, mistakes) == 2


def test_a_mistake_that_explains_only_the_first_failing_case_is_not_named():
    # 1/d and d**-0.5 agree at d = 1: the first case alone would name the wrong one.
    cases = [Case(f"d={d}", {"d": torch.tensor(float(d))}) for d in (1, 4, 9)]
    mistakes = [Mistake("inverse", "1/d", lambda d: 1 / d), Mistake("inverse-sqrt", "d**-0.5", lambda d: d**-0.5)]
    with pytest.raises(CheckFailed) as caught:
        check_function(lambda d: d**-0.5, lambda d: d * 0, cases, mistakes)
    assert caught.value.mistake is mistakes[1]  # explains d = 1, 4 and 9
    with pytest.raises(CheckFailed) as caught:  # 1/d at d = 1 and 4, something else at 9
        check_function(lambda d: 1 / d if d < 5 else d, lambda d: d * 0, cases, mistakes)
    assert caught.value.mistake is None and "Likely mistake" not in str(caught.value)
    assert str(caught.value).startswith("wrong result for d=1")


def test_a_mistake_wrong_where_the_answer_is_right_is_not_named():
    # "halved" explains the failing case d = 8, but it halves d = 2 too, where the answer is right.
    cases = [Case(f"d={d}", {"d": torch.tensor(float(d))}) for d in (2, 8)]
    mistakes = [Mistake("halved", "halved", lambda d: d / 2), Mistake("zeroed-above-4", "zeroed", lambda d: d * (d < 5))
                ]
    with pytest.raises(CheckFailed) as caught:
        check_function(lambda d: d if d < 5 else d / 2, lambda d: d, cases, mistakes)
    assert caught.value.mistake is None and str(caught.value).startswith("wrong result for d=8")
    with pytest.raises(CheckFailed) as caught:  # the same answer wrong everywhere the variant is: named
        check_function(lambda d: d * (d < 5), lambda d: d, cases, mistakes)
    assert caught.value.mistake is mistakes[1]


def test_check_function_compares_with_a_differ_of_its_own():
    # A differ(expected, got, case) replaces compare: here results are strings, and the message is the differ's.
    cases = [Case("n=1", {"n": 1}), Case("n=2", {"n": 2})]
    mistakes = [Mistake("shouted", "shouted", lambda n: "HI" * n)]

    def differ(expected, got, case):
        return None if got == expected else f"expected {expected!r} for n={case.args['n']}, got {got!r}"

    assert check_function(lambda n: "hi" * n, lambda n: "hi" * n, cases, mistakes, differ=differ) == 2
    with pytest.raises(CheckFailed, match=r"wrong result for n=1\n  expected 'hi' for n=1, got 'HI'") as caught:
        check_function(lambda n: "HI" * n, lambda n: "hi" * n, cases, mistakes, differ=differ)
    assert caught.value.mistake is mistakes[0]


def test_an_error_on_a_later_case_names_a_mistake_only_if_it_raises_the_same():
    cases = [Case("n=2", {"n": 2}), Case("n=0", {"n": 0})]
    integer = [Mistake("halved", "halved", lambda n: 2 // n)]
    with pytest.raises(CheckFailed) as caught:  # ZeroDivisionError at n = 0, like the variant: named
        check_function(lambda n: 2 // n, lambda n: n, cases, integer)
    assert caught.value.mistake is integer[0] and str(caught.value).startswith("wrong result for n=2")
    with pytest.raises(CheckFailed) as caught:  # another error at n = 0: not named
        check_function(lambda n: 2 // n if n else [][0], lambda n: n, cases, integer)
    assert caught.value.mistake is None


def test_the_recognised_mistake_survives_the_exercise_prefix():
    # What a program (lesson 8's check, the grader) reads instead of searching the message for "Likely mistake".
    with pytest.raises(CheckFailed) as caught:
        check("01.2", lambda t: (t[..., 1:], t[..., :-1]))
    assert caught.value.mistake.id == "inputs-targets-swapped" and caught.value.message.startswith("01.2 ")
    assert str(caught.value) == f"{caught.value.message}\nLikely mistake: {caught.value.mistake.hint}"


def test_a_failure_header_names_its_case_once():
    with pytest.raises(CheckFailed) as caught:
        check("03.1", lambda n: torch.ones(n, n, dtype=torch.bool).tril(-1))
    header = str(caught.value).splitlines()[0]
    assert header.endswith("wrong result for n=4"), header  # not "n=4 [n=4]"
    assert caught.value.mistake.id == "diagonal-excluded"
    both = Case("n=6, d=8", {"n": 6, "d": 8, "base": 100.0, "x": torch.zeros(2, 3)})
    assert both.describe() == "n=6, d=8 [base=100.0, x (2, 3)]"  # what the label leaves out is still shown
    assert Case("tied", {"d": 8}).describe() == "tied [d=8]"


@pytest.mark.parametrize("slug", ["", "Diagonal", "diagonal_excluded", "-x", "x-", "a--b", "x" * 41, 3])
def test_a_mistake_id_is_a_short_kebab_case_slug(slug):
    with pytest.raises(ValueError, match="kebab-case slug"):
        Mistake(slug, "a hint", lambda x: x)
    with pytest.raises(TypeError, match="expected a Mistake or None, got str"):
        CheckFailed("wrong", mistake="a hint without an id")


def _mistakes_by_exercise() -> dict[str, list[tuple[str, str, str]]]:
    """Every ``Mistake(...)`` written in checks/*.py, by the exercise whose checker reaches it: (id, hint source,
    where). A Mistake inside a helper belongs to every exercise whose checker refers to that helper, directly or
    through other helpers of the same module; ids must be string literals."""
    found: dict[str, list[tuple[str, str, str]]] = {}
    for path in sorted(Path(core.__file__).parent.glob("*.py")):
        tree = ast.parse(path.read_text())
        tops = {}
        for node in tree.body:
            targets = getattr(node, "targets", [getattr(node, "target", None)])
            names = ([node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                     [t.id for t in targets if isinstance(t, ast.Name)])
            for name in names:
                tops[name] = node
        refs = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in tops} for name, node in
                tops.items()}
        owners: dict[str, set[str]] = {}
        for name, node in tops.items():
            for deco in getattr(node, "decorator_list", []):
                if isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "exercise":
                    reach, todo = set(), [name]
                    while todo:
                        item = todo.pop()
                        if item not in reach:
                            reach.add(item)
                            todo += refs[item]
                    for item in reach:
                        owners.setdefault(item, set()).add(deco.args[0].value)
        for name, node in tops.items():
            for call in ast.walk(node):
                if not (isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Mistake"):
                    continue
                where = f"{path.name}:{call.lineno}"
                assert isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str), (
                    f"{where}: a Mistake's id must be a string literal")
                assert owners.get(name), f"{where}: no exercise's checker reaches this Mistake"
                for ex in owners[name]:
                    found.setdefault(ex, []).append((call.args[0].value, ast.unparse(call.args[1]), where))
    return found


def test_every_mistake_has_an_id_that_names_one_mistake_of_its_exercise():
    found = _mistakes_by_exercise()
    assert set(found) <= set(REGISTRY) and len(found) > 30 and sum(map(len, found.values())) > 150
    for exercise_id, mistakes in found.items():
        hints: dict[str, dict[str, str]] = {}
        ids: dict[str, dict[str, str]] = {}
        for slug, hint, where in mistakes:
            Mistake(slug, "a hint")  # the slug's format
            hints.setdefault(slug, {})[hint] = where
            ids.setdefault(hint, {})[slug] = where
        assert all(len(h) == 1 for h in hints.values()), f"{exercise_id}: an id with several hints: {hints}"
        assert all(len(i) == 1 for i in ids.values()), f"{exercise_id}: a hint with several ids: {ids}"


def test_registry_entries_are_well_formed():
    assert REGISTRY, "no exercise registered"
    for exercise_id, ex in REGISTRY.items():
        assert re.fullmatch(r"\d{2}\.\d+", exercise_id) and ex.id == exercise_id
        assert isinstance(ex.points, int) and ex.points > 0
        assert ex.title and ex.lesson == exercise_id[:2]


def test_tolerance_follows_the_size_of_the_numbers():
    """A near-zero entry beside entries near 10 carries rounding of 10 x eps (08.4's hidden case on an AVX-512 CPU
    differed by 2.9e-6 at -0.00074): accepted; a real error of the same row is not, nor is 3e-6 in small numbers."""
    expected = torch.tensor([[-10.37, -2.189, -0.0007438, 1.237]])
    assert compare(expected, expected + torch.tensor([[0.0, 0.0, 2.9e-6, 0.0]])) is None
    assert "1 of 4 values differ" in compare(expected, expected + torch.tensor([[0.0, 0.0, 1e-4, 0.0]]))
    small = torch.tensor([[0.5, -0.0007438]])
    assert "1 of 2 values differ" in compare(small, small + torch.tensor([[0.0, 3e-6]]))
    assert compare(torch.tensor([float("inf"), 1.0]), torch.tensor([float("inf"), 1.0])) is None


def test_a_module_check_names_a_mistake_only_when_it_explains_every_case():
    """check_module builds a module per case: an answer that makes a known mistake on the first case and another
    error on the others gets no name (before, the first failing case alone chose it), while the mistake made on
    every case still gets its own."""
    from tests.answers.lesson07 import Block, block_with

    no_residual = block_with("no residual")
    calls = []

    class MistakeOnTheFirstCaseOnly(no_residual):
        def forward(self, x, mask=None):
            calls.append(len(x))
            if len(calls) == 1:
                return super().forward(x, mask)  # norm2(ffn(norm1(attention))): the residuals left out
            self.mistake = None
            return 2 * Block.forward(self, x, mask)  # wrong, and explained by no known mistake

    with pytest.raises(CheckFailed) as named:
        check("07.3", no_residual)
    assert named.value.mistake is not None and named.value.mistake.id == "residual-missing"
    with pytest.raises(CheckFailed) as unnamed:
        check("07.3", MistakeOnTheFirstCaseOnly)
    assert len(calls) >= 2 and unnamed.value.mistake is None, unnamed.value
    assert str(unnamed.value).startswith("07.3") and "wrong result for" in str(unnamed.value)
