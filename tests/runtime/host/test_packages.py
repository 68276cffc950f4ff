"""Installed versions: one lookup by distribution, behind the import-name view the backends and reports use."""

from __future__ import annotations

import pytest

from helpers.site_packages import site_package
from slime_flashqla.host.packages import PIP_PACKAGES, distribution_version, installed_version, require


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_a_later_distribution_stands_for_the_import_where_the_first_is_absent(site):
    """fla before 0.5 came from flash-linear-attention alone (no fla-core): its version is still found."""
    site_package(site, "fla", "flash-linear-attention", "0.4.1")
    if distribution_version("fla-core") is not None:
        pytest.skip("fla-core is installed here and comes first")
    assert installed_version("fla") == "0.4.1"
    assert distribution_version("flash-linear-attention") == "0.4.1"


def test_an_import_without_a_distribution_is_unknown_and_a_missing_one_none(site):
    site_package(site, "slime_flashqla_probe_module")
    assert installed_version("slime_flashqla_probe_module") == "unknown"
    assert installed_version("slime_flashqla_no_such_module") is None
    assert distribution_version("slime-flashqla-no-such-distribution") is None


def test_a_missing_kernel_package_is_refused_with_its_pip_name():
    module = next((m for m in PIP_PACKAGES if installed_version(m) is None), None)
    if module is None:
        pytest.skip("every kernel package is installed here")
    with pytest.raises(ImportError, match=f"the 'x' GDN backend needs the '{module}' module: pip install "
                       f"{PIP_PACKAGES[module]}"):  # fmt: skip
        require(module, "x")
