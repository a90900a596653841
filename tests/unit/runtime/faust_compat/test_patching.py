from services.runtime.faust_compat.patching import Patch


def test_a_patch_installs_once_however_often_it_is_applied() -> None:
    calls: list[int] = []
    patch = Patch(lambda: calls.append(1))
    assert not patch.installed
    patch.apply()
    patch.apply()
    assert patch.installed and calls == [1]


def test_a_failed_install_is_not_counted_as_installed() -> None:
    def broken() -> None:
        raise RuntimeError("faust changed")

    patch = Patch(broken)
    try:
        patch.apply()
    except RuntimeError:
        pass
    assert not patch.installed
