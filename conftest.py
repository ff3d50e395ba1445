"""Repository-wide pytest configuration.

nbval names each notebook cell by its position ("Cell 7"), so inserting a cell renames every test after
it. Name them by the cell's id instead, which nbformat 4.5 keeps stable across edits.
"""


def pytest_collection_modifyitems(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is not None and getattr(item, "cell_num", None) is not None and cell.get("id"):
            item._nodeid = f"{item.parent.nodeid}::{cell['id']}"
