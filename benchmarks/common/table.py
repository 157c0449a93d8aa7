"""The one table printer: fixed-width columns, a header line, rows of cells formatted by the caller (a figure's
digits are the benchmark's business, the alignment is the table's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Column:
    header: str
    width: int
    align: str = ">"  # ">" right, "<" left


@dataclass(frozen=True)
class Table:
    columns: Sequence[Column]
    indent: str = ""
    separator: str = " "

    def line(self, cells: Sequence[object]) -> str:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        text = self.separator.join(f"{str(cell):{col.align}{col.width}}" for col, cell in zip(self.columns, cells))
        return (self.indent + text).rstrip()

    def header(self) -> str:
        return self.line([col.header for col in self.columns])

    def print_header(self) -> None:
        print(self.header())

    def print_row(self, *cells: object) -> None:
        print(self.line(cells))


def columns(*spec: tuple[str, int]) -> list[Column]:
    """``columns(("decoder", -21), ("rows", 4))``: a negative width aligns left."""
    return [Column(s[0], abs(s[1]), "<" if s[1] < 0 else ">") for s in spec]
