"""The one Registry behind every plug-in kind: names, errors, entry points, lazy entries."""

from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from lightning_cls.registry import Registry


def fresh(returns=None) -> Registry:
    return Registry("widget", "lightning_cls_test.widgets", returns=returns)


def test_functions_and_classes_register_alike_and_build_with_kwargs():
    registry = fresh()

    @registry.register("double")
    def double(x: int = 1) -> int:
        return 2 * x

    registry.register("pair")(tuple)  # a class is its own builder
    registry.register(sorted)  # default name: __name__
    assert registry.names() == ["double", "pair", "sorted"]
    assert registry.names("d*") == ["double"]
    assert registry.create("double", x=4) == 8 and "pair" in registry
    assert registry.create("pair") == () and registry.get("pair") is tuple


def test_duplicate_name_is_an_error_naming_both_owners_but_the_same_object_may_repeat():
    registry = fresh()
    registry.register("a")(dict)
    registry.register("a")(dict)  # a module imported twice registers the same object again
    with pytest.raises(
        ValueError, match=r"'a' is already registered by builtins\.dict; builtins\.list must"
    ):
        registry.register("a")(list)


def test_non_callable_and_bad_names_are_refused():
    registry = fresh()
    with pytest.raises(TypeError, match="register a builder function or a class, not a int"):
        registry.register("n")(3)
    with pytest.raises(ValueError, match="name must be a non-empty string, got ''"):
        registry.register("")(dict)


def test_unknown_name_suggests_the_closest_and_lists_known():
    registry = fresh()
    registry.register("resnet18")(dict)
    registry.register("simplecnn")(dict)
    with pytest.raises(
        ValueError,
        match=(
            r"Unknown widget 'resnet81'\. Did you mean 'resnet18'\? Known: resnet18, simplecnn\. "
            r"Plug-ins add names through the 'lightning_cls_test\.widgets' entry-point group\."
        ),
    ):
        registry.create("resnet81")


def test_builder_returning_the_wrong_type_is_named():
    registry = fresh(returns=dict)
    registry.register("bad")(list)
    with pytest.raises(
        TypeError,
        match=r"Widget 'bad' \(builtins\.list\) returned a list; .* must return builtins\.dict",
    ):
        registry.create("bad")


@pytest.fixture
def plugin_dist(tmp_path, monkeypatch):
    """An installed distribution (a .dist-info with entry points) and its package, on sys.path."""
    pkg = tmp_path / "widget_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "def build_gadget(size=1):\n    return {'size': size}\nNOT_A_BUILDER = 3\n"
    )
    (pkg / "more.py").write_text(
        textwrap.dedent("""
        from lightning_cls_test_registry import REGISTRY
        REGISTRY.register("from_module")(dict)
    """)
    )
    (tmp_path / "broken_pkg.py").write_text("raise ImportError('needs a missing library')\n")
    info = tmp_path / "widget_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: widget-pkg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""
        [lightning_cls_test.widgets]
        gadget = widget_pkg:build_gadget
        more = widget_pkg.more
        constant = widget_pkg:NOT_A_BUILDER
        broken = broken_pkg:anything
    """)
    )
    registry = fresh()
    holder = tmp_path / "lightning_cls_test_registry.py"
    holder.write_text("REGISTRY = None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lightning_cls_test_registry

    monkeypatch.setattr(lightning_cls_test_registry, "REGISTRY", registry)
    yield registry
    for name in ("widget_pkg", "widget_pkg.more", "broken_pkg", "lightning_cls_test_registry"):
        sys.modules.pop(name, None)


def test_entry_points_register_builders_and_modules_and_skip_broken_ones(plugin_dist, caplog):
    registry = plugin_dist
    with caplog.at_level(logging.WARNING, logger="lightning_cls.registry"):
        assert registry.names() == ["from_module", "gadget"]
    assert registry.create("gadget", size=3) == {"size": 3}
    assert registry.create("from_module") == {}
    warnings = " ".join(r.getMessage() for r in caplog.records)
    assert "'broken' (broken_pkg:anything): needs a missing library" in warnings
    assert "'constant' (widget_pkg:NOT_A_BUILDER) is a int" in warnings


def test_entry_point_clashing_with_a_registered_name_is_an_error_at_every_lookup(plugin_dist):
    registry = plugin_dist
    registry.register("gadget")(dict)  # e.g. a built-in of that name
    for _ in range(2):  # not only the first time
        with pytest.raises(
            ValueError,
            match=r"'gadget' is already registered by builtins\.dict; widget_pkg\.build_gadget",
        ):
            registry.names()
    assert registry._builders["from_module"] is dict  # the other entry points were still read


def test_a_lazy_entry_is_listed_at_once_and_imported_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_widget_pkg.py").write_text("def build(size=1):\n    return [size]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = fresh()
    registry.register("lazy", "lazy_widget_pkg:build")
    try:
        assert "lazy_widget_pkg" not in sys.modules and list(registry) == ["lazy"]
        assert registry.create("lazy", size=2) == [2]  # imported here
        import lazy_widget_pkg

        registry.register("lazy")(lazy_widget_pkg.build)  # the module registering itself: fine
        assert registry["lazy"] is lazy_widget_pkg.build
        with pytest.raises(ValueError, match=r"'lazy' is already registered by lazy_widget_pkg"):
            registry.register("lazy")(dict)
        with pytest.raises(ValueError, match=r"register\('name', 'package\.module:attribute'\)"):
            registry.register("other", "no_colon")
        assert registry.pop("lazy") is lazy_widget_pkg.build and "lazy" not in registry
    finally:
        sys.modules.pop("lazy_widget_pkg", None)


def test_formats_and_runtimes_are_registries_of_the_same_kind():
    from lightning_cls.export.writer import FORMATS
    from lightning_cls.inference.runtimes import RUNTIMES

    assert isinstance(FORMATS, Registry) and isinstance(RUNTIMES, Registry)
    with pytest.raises(ValueError, match=r"Unknown export format 'onxx'\. Did you mean 'onnx'\?"):
        FORMATS.get("onxx")
    with pytest.raises(KeyError):
        RUNTIMES[".nope"]
