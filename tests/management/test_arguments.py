"""The ``bgtasks`` command line (management/arguments.py): a subcommand is
required, each is declared in ``SUBCOMMANDS``'s order with a handler,
Django's common options are taken after the subcommand too, and a value
that breaks its option's rule is refused, while the command line is parsed
or, by keyword, past argparse (``checked()``)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError

from django_bgtasks.management.arguments import SUBCOMMANDS, checked
from django_bgtasks.management.commands.bgtasks import Command
from tests.management.test_bgtasks import bgtasks


@pytest.mark.parametrize("args", [["--interval", "0"], ["--iterations", "0"]])
def test_watch_refuses_bad_options(site_alias: str, args: list[str]) -> None:
    with pytest.raises(CommandError, match="must be"):
        bgtasks("watch", *args)


def test_a_subcommand_is_required(site_alias: str) -> None:
    with pytest.raises(CommandError, match="required"):
        bgtasks()


def test_djangos_common_options_are_accepted_after_the_subcommand_too() -> None:
    parser = Command().create_parser("manage.py", "bgtasks")
    given = ["-v", "3", "--settings", "s", "--pythonpath", "p", "--traceback", "--skip-checks"]
    after = parser.parse_args(["worker", *given, "--no-color"])
    assert (after.verbosity, after.settings, after.pythonpath) == (3, "s", "p")
    assert after.traceback and after.skip_checks and after.no_color
    before = parser.parse_args(["--verbosity", "0", "list"])
    assert (before.verbosity, before.traceback) == (0, False)
    with pytest.raises(CommandError, match="invalid choice: 4"):
        parser.parse_args(["workers", "-v", "4"])


@pytest.mark.parametrize("max_age", ["0", "-5", "1.5", "x", str(3650 * 86400 + 1)])
def test_token_refuses_a_bad_max_age(max_age: str) -> None:
    with pytest.raises(CommandError):
        bgtasks("token", "ops-bot", "--max-age", max_age)


# The subcommands whose one argument is required.
NAMED = {"show", "run", "release", "request", "token"}


def test_each_subcommand_is_declared_in_its_order_with_its_summary_and_has_a_handler() -> None:
    parser = Command().create_parser("manage.py", "bgtasks")
    flat = " ".join(parser.format_help().split())  # as argparse wraps it, unwrapped
    positions = [flat.find(" ".join(summary.split())) for summary, _ in SUBCOMMANDS.values()]
    assert -1 not in positions and positions == sorted(positions)
    for name in SUBCOMMANDS:
        assert callable(getattr(Command, f"handle_{name}", None)), name
        assert parser.parse_args([name, *(["x"] if name in NAMED else [])]).subcommand == name
    with pytest.raises(CommandError, match="invalid choice: 'nope'"):
        parser.parse_args(["nope"])


def test_a_bad_value_is_refused_with_its_rules_message_parsed_or_handed_over() -> None:
    with pytest.raises(
        CommandError,
        match=r"argument --interval: --interval must be above 0 and at most 86400 seconds, "
        r"not 100000\.$",
    ):
        bgtasks("watch", "--interval", "100000")
    with pytest.raises(CommandError, match=r"argument --iterations: invalid int value: '1\.5'$"):
        bgtasks("watch", "--iterations", "1.5")
    # By keyword, past argparse: the same rules, each value what its rule returns.
    given = {"days": 3.0, "interval": 0.5, "iterations": None, "limit": "5", "name": "x"}
    assert checked(given) == given | {"limit": 5}
    assert given["limit"] == "5"  # a copy: the options handed over are left alone
    with pytest.raises(ValueError, match=r"^--days must be 0 or more, and at most \d+, not -1\.$"):
        checked({"days": -1})
    with pytest.raises(ValueError, match=r"^--iterations must be 1 or more, not 0\.$"):
        checked({"iterations": 0})
    with pytest.raises(TypeError, match=r"^workers must be a whole number, not '2'\.$"):
        checked({"workers": "2"})
