"""The SQLite stores' private modules; the public names live in :mod:`opsrun.stores.sqlite`."""
