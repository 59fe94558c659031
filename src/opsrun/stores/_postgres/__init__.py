"""The PostgreSQL stores' private modules; the public names are in :mod:`opsrun.stores.postgres`."""
