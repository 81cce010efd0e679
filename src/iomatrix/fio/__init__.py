"""fio job rendering (cell semantics → fio options) and fio JSON parsing."""
