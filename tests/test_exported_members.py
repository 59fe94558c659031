"""Each public package's ``__all__`` and its namespace stay in step (as httpx checks its own)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from types import ModuleType

import pytest

import opsrun
import opsrun.errors
from opsrun.errors import OpsrunError

PUBLIC_MODULES = [
    "opsrun",
    "opsrun.errors",
    "opsrun.model",
    "opsrun.runner",
    "opsrun.stores",
    "opsrun.protocol",
    "opsrun.testing",
    "opsrun.providers",
]


def _module_with_all(name: str) -> ModuleType:
    if importlib.util.find_spec(name) is None:
        pytest.skip(f"{name} does not exist yet")
    module = importlib.import_module(name)
    if not hasattr(module, "__all__"):
        pytest.skip(f"{name} defines no __all__ yet")
    return module


def _defined_in_opsrun(obj: object) -> bool:
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return False
    return getattr(obj, "__module__", "").split(".")[0] == "opsrun"


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_all_names_exist(module_name: str) -> None:
    module = _module_with_all(module_name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), "duplicate names in __all__"
    missing = [name for name in exported if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_members_are_exported(module_name: str) -> None:
    module = _module_with_all(module_name)
    public = {
        name
        for name, obj in vars(module).items()
        if not name.startswith("_") and _defined_in_opsrun(obj)
    }
    assert public - set(module.__all__) == set()


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_exported_errors_belong_to_the_tree(module_name: str) -> None:
    module = _module_with_all(module_name)
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            assert issubclass(obj, OpsrunError), name
            default_code = obj.default_code
            assert isinstance(default_code, str), name
            assert default_code.strip(), name


def test_every_error_class_is_exported_from_the_top_level() -> None:
    errors = {
        name
        for name, obj in vars(opsrun.errors).items()
        if inspect.isclass(obj) and issubclass(obj, OpsrunError)
    }
    assert errors <= set(opsrun.__all__)
    for name in errors:
        assert getattr(opsrun, name) is getattr(opsrun.errors, name)


def test_error_codes_are_distinct() -> None:
    classes = [
        obj
        for obj in vars(opsrun.errors).values()
        if inspect.isclass(obj) and issubclass(obj, OpsrunError)
    ]
    codes = [cls.default_code for cls in classes]
    assert len(codes) == len(set(codes))


def test_top_level_reexports_are_the_same_objects() -> None:
    import opsrun.model as model

    for name in opsrun.__all__:
        if hasattr(model, name):
            assert getattr(opsrun, name) is getattr(model, name), name


def test_version() -> None:
    assert isinstance(opsrun.__version__, str)
    assert opsrun.__version__.count(".") == 2
