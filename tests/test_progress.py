"""Progress bars go to stderr and never touch stdout."""

from __future__ import annotations

import builtins

from privml._progress import _PlainBar, progress_bar


def test_plain_bar_writes_only_to_stderr(capsys):
    with _PlainBar(10, "work", "step", min_interval=0.0) as bar:
        for _ in range(10):
            bar.update()
        bar.set_postfix_str("eps=0.5")
    out, err = capsys.readouterr()
    assert out == ""
    assert "10/10 step" in err and "work" in err and "eps=0.5" in err


def test_disabled_bar_is_silent(capsys):
    with progress_bar(5, desc="x", enabled=False) as bar:
        bar.update(5)
    assert capsys.readouterr() == ("", "")


def test_falls_back_without_tqdm(monkeypatch, capsys):
    real_import = builtins.__import__

    def no_tqdm(name, *args, **kwargs):
        if name == "tqdm":
            raise ImportError("no tqdm")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tqdm)
    bar = progress_bar(3, desc="fallback", unit="pass")
    assert isinstance(bar, _PlainBar)
    bar.update(3)
    bar.close()
    assert "3/3 pass" in capsys.readouterr().err


def test_no_bar_for_no_work(capsys):
    # A study whose runs are all done drew "0/1 run ... ~nans left".
    with progress_bar(0, desc="study", unit="run") as bar:
        bar.update(0)
    assert capsys.readouterr().err == ""
