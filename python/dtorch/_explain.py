"""dtorch.explain(): why the last segment communicated, in the user's names.

Each row is one redistribution that sharding propagation inserted (or that
the program asked for with redistribute()): the op and operand that needed
it, the tensor, the placements before and after (with the mesh dim names),
the collectives it lowers to and the bytes each rank sends. A row whose
"regather" is True is a second gather of a value whose first gathered copy
was released (fully_shard's backward all_gather with
reshard_after_forward=True); the table shows its op as "redistribute
(regather)". The compiler's
--dtensor-explain-redistributions pass prints the same information as
remarks.
"""
from . import _C


class Explanation:
    """The redistributions of one segment: iterate for dicts, str() for a table."""

    _COLUMNS = (("op", "op"), ("operand", "operand"), ("shape", "shape"),
                ("before", "before"), ("after", "after"),
                ("collectives", "collectives"), ("bytes_per_rank", "bytes/rank"))

    def __init__(self, compiled, rows):
        self.compiled = bool(compiled)
        self._rows = [dict(r) for r in rows]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self):
        return len(self._rows)

    def __getitem__(self, index):
        return self._rows[index]

    @property
    def bytes_per_rank(self):
        """Bytes each mesh position sends over the whole segment."""
        total = [0] * max((len(row["bytes_per_rank"]) for row in self._rows), default=0)
        for row in self._rows:
            for position, sent in enumerate(row["bytes_per_rank"]):
                total[position] += sent
        return total

    @property
    def communicates(self):
        return any(row["collectives"] for row in self._rows)

    @staticmethod
    def _cell(key, row):
        value = row[key]
        if key == "op" and row.get("regather"):
            return f"{value} (regather)"
        if key == "operand":
            return "-" if value is None else str(value)
        if key == "shape":
            return "x".join(str(d) for d in value) + " " + row["dtype"]
        if key == "collectives":
            return ", ".join(value) if value else "none (local)"
        if key == "bytes_per_rank":
            lo, hi = (min(value), max(value)) if value else (0, 0)
            return str(hi) if lo == hi else f"{lo}..{hi}"
        return str(value)

    def __str__(self):
        if not self.compiled:
            return "no segment has run yet"
        if not self._rows:
            return "no communication"
        header = [title for _, title in self._COLUMNS]
        body = [[self._cell(key, row) for key, _ in self._COLUMNS] for row in self._rows]
        widths = [max(len(line[i]) for line in [header] + body) for i in range(len(header))]

        def fmt(line):
            return "  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip()

        lines = [fmt(header), fmt(["-" * w for w in widths])] + [fmt(line) for line in body]
        if self.communicates:
            lines.append(f"each rank sends up to {max(self.bytes_per_rank)} bytes")
        else:
            lines.append("no communication (local slices only)")
        return "\n".join(lines)

    def __repr__(self):
        return str(self)


def explain():
    """Why the last segment communicated: one row per redistribution (empty
    before any segment ran). Pending ops are submitted first."""
    if not _C.is_initialized():
        return Explanation(False, [])
    compiled, rows = _C.explain()
    return Explanation(compiled, rows)
