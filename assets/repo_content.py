'''Files of "tinyledger", the toy project packed into assets/sample_repo.tar.gz.

FILES maps a path to its text. make_assets.py adds the files that demonstrate skipping
(a binary logo, a node_modules/ package, a minified bundle) on top of these.
'''

FILES = {
    "tinyledger/README.md": """\
# tinyledger

A tiny double-entry bookkeeping tool. Transactions live in a plain-text ledger file;
`tinyledger balance FILE` prints account balances and `tinyledger report FILE` prints a
monthly income statement.

## Ledger format

    2024-03-01 Coffee beans
        expenses:food        12.50
        assets:cash         -12.50

Every transaction must balance to zero. Amounts use a dot as the decimal separator.
See docs/usage.md for details.
""",
    "tinyledger/pyproject.toml": """\
[project]
name = "tinyledger"
version = "0.3.1"
requires-python = ">=3.10"

[project.scripts]
tinyledger = "tinyledger.cli:main"
""",
    "tinyledger/tinyledger/__init__.py": '''\
"""tinyledger: plain-text double-entry bookkeeping."""
from .ledger import Ledger, Posting, Transaction
from .parser import parse_ledger

__all__ = ["Ledger", "Posting", "Transaction", "parse_ledger"]
__version__ = "0.3.1"
''',
    "tinyledger/tinyledger/ledger.py": '''\
"""Core data model. Amounts are integers in cents, so sums are exact."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date


class UnbalancedTransaction(ValueError):
    pass


@dataclass(frozen=True)
class Posting:
    account: str
    cents: int


@dataclass
class Transaction:
    day: date
    description: str
    postings: list[Posting] = field(default_factory=list)

    def check(self) -> None:
        total = sum(p.cents for p in self.postings)
        if total != 0:
            raise UnbalancedTransaction(f"{self.day} {self.description!r} is off by {total} cents")


class Ledger:
    def __init__(self) -> None:
        self.transactions: list[Transaction] = []

    def add(self, tx: Transaction) -> None:
        tx.check()
        self.transactions.append(tx)

    def balances(self, until: date | None = None) -> dict[str, int]:
        """Balance per account, including parents: 'expenses' sums 'expenses:food' etc."""
        result: dict[str, int] = defaultdict(int)
        for tx in self.transactions:
            if until is not None and tx.day > until:
                continue
            for posting in tx.postings:
                parts = posting.account.split(":")
                for depth in range(1, len(parts) + 1):
                    result[":".join(parts[:depth])] += posting.cents
        return dict(result)
''',
    "tinyledger/tinyledger/parser.py": '''\
"""Parse the ledger text format (see README.md)."""
from __future__ import annotations

from datetime import date

from .ledger import Ledger, Posting, Transaction


class ParseError(ValueError):
    def __init__(self, line_no: int, message: str):
        super().__init__(f"line {line_no}: {message}")
        self.line_no = line_no


def parse_amount(text: str, line_no: int) -> int:
    """'12.50' -> 1250 cents. Rejects more than two decimals."""
    sign = -1 if text.startswith("-") else 1
    whole, _, frac = text.lstrip("+-").partition(".")
    if not whole.isdigit() or (frac and (not frac.isdigit() or len(frac) > 2)):
        raise ParseError(line_no, f"bad amount {text!r}")
    return sign * (int(whole) * 100 + int(frac.ljust(2, "0") or 0))


def parse_ledger(text: str) -> Ledger:
    ledger, current = Ledger(), None
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(";", 1)[0].rstrip()  # ';' starts a comment
        if not line:
            continue
        if not raw[0].isspace():
            if current is not None:
                ledger.add(current)
            day, _, description = line.partition(" ")
            try:
                current = Transaction(date.fromisoformat(day), description.strip())
            except ValueError:
                raise ParseError(line_no, f"bad date {day!r}") from None
        elif current is None:
            raise ParseError(line_no, "posting before any transaction")
        else:
            account, _, amount = line.strip().rpartition(" ")
            current.postings.append(Posting(account.strip(), parse_amount(amount, line_no)))
    if current is not None:
        ledger.add(current)
    return ledger
''',
    "tinyledger/tinyledger/report.py": '''\
"""Monthly income statement: income and expenses per calendar month."""
from __future__ import annotations

from collections import defaultdict

from .ledger import Ledger


def monthly_totals(ledger: Ledger) -> dict[str, dict[str, int]]:
    """{'2024-03': {'income': -500000, 'expenses': 123450}} (income is negative by convention)."""
    months: dict[str, dict[str, int]] = defaultdict(lambda: {"income": 0, "expenses": 0})
    for tx in ledger.transactions:
        key = tx.day.strftime("%Y-%m")
        for posting in tx.postings:
            top = posting.account.split(":", 1)[0]
            if top in ("income", "expenses"):
                months[key][top] += posting.cents
    return dict(sorted(months.items()))


def format_report(ledger: Ledger) -> str:
    lines = [f"{'month':<8} {'income':>12} {'expenses':>12} {'net':>12}"]
    for month, t in monthly_totals(ledger).items():
        income, expenses = -t["income"], t["expenses"]
        lines.append(f"{month:<8} {income / 100:>12.2f} {expenses / 100:>12.2f} {(income - expenses) / 100:>12.2f}")
    return "\\n".join(lines)
''',
    "tinyledger/tinyledger/cli.py": '''\
"""Command line: tinyledger balance|report FILE"""
from __future__ import annotations

import argparse
import sys

from .parser import ParseError, parse_ledger
from .report import format_report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tinyledger")
    parser.add_argument("command", choices=["balance", "report"])
    parser.add_argument("file")
    args = parser.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as handle:
            ledger = parse_ledger(handle.read())
    except (OSError, ParseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.command == "balance":
        for account, cents in sorted(ledger.balances().items()):
            print(f"{account:<30} {cents / 100:>12.2f}")
    else:
        print(format_report(ledger))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
''',
    "tinyledger/tests/test_ledger.py": '''\
import pytest

from tinyledger import parse_ledger
from tinyledger.ledger import UnbalancedTransaction

SAMPLE = """
2024-03-01 Salary
    assets:bank        2500.00
    income:salary     -2500.00
2024-03-02 Coffee beans
    expenses:food        12.50
    assets:bank         -12.50
"""


def test_balances_roll_up_to_parents():
    balances = parse_ledger(SAMPLE).balances()
    assert balances["assets:bank"] == 248750
    assert balances["expenses"] == 1250


def test_unbalanced_transaction_is_rejected():
    with pytest.raises(UnbalancedTransaction):
        parse_ledger("2024-01-01 Oops\\n    a  1.00\\n    b  -0.99\\n")
''',
    "tinyledger/docs/usage.md": """\
# Usage

Install with `pip install -e .`, then:

    tinyledger balance examples/household.ledger
    tinyledger report examples/household.ledger

Accounts are colon-separated paths; balances roll up, so `expenses` includes
`expenses:food`. Comments start with `;`. The parser rejects amounts with more than two
decimals (error code: line N: bad amount).

Known limitation: only one currency is supported (version 0.3.1).
""",
    "tinyledger/examples/household.ledger": """\
; Household ledger for March 2024
2024-03-01 Salary
    assets:bank        2500.00
    income:salary     -2500.00
2024-03-02 Coffee beans
    expenses:food        12.50
    assets:cash         -12.50
2024-03-05 Rent
    expenses:rent       950.00
    assets:bank        -950.00
2024-03-18 Train ticket
    expenses:transport   39.90
    assets:bank         -39.90
""",
}
