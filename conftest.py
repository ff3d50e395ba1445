"""Repository-wide pytest configuration.

nbval names each notebook cell by its position ("Cell 7"), so inserting a cell renames every test after
it. Name them by the cell's id instead, which nbformat 4.5 keeps stable across edits.
"""


def pytest_collection_modifyitems(items):
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None or not hasattr(item, "cell_num") or not cell.get("id"):
            continue
        item.name = cell["id"]
        item._id = item.parent.id.child(item.name)  # pytest 9 derives nodeid from this structured id
