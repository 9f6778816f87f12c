"""submit's directory walk: what it takes from the directories given, and the one line
that counts what it leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from stages.cli.submit import expand, report_skipped
from tests.made_formats import MAKERS


def test_a_directory_walk_takes_documents_and_counts_what_it_leaves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files named as a format ragline reads go in (their content is checked at submit);
    a file without a suffix goes in when its content is a document format other than
    text; every other file is counted per suffix and said in one line, hidden ones
    aside."""
    root = tmp_path / "folder"
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    picture = MAKERS["png"](root / "picture.png")
    (root / "sub" / "report.md").write_text("# Report\n\nText.\n")
    scan = root / "sub" / "scan_001"
    scan.write_bytes(picture.read_bytes())  # a PNG without its suffix
    (root / "README").write_text("A text without a suffix is left out.\n")
    (root / "data.csv").write_text("a,b\n1,2\n")
    (root / "more.CSV").write_text("a,b\n3,4\n")
    (root / "notes.json").write_text('{"a": 1}')
    (root / ".DS_Store").write_bytes(b"\x00\x01")
    (root / ".git" / "config").write_text("[core]\n")
    (root / "gone.pdf").symlink_to(root / "nowhere.pdf")

    found = expand([str(root)])
    assert [p.relative_to(root).as_posix() for p in found.files] == [
        "picture.png",
        "sub/report.md",
        "sub/scan_001",
    ]
    assert [r.reason for r in found.refused] == ["symbolic link to a file that does not exist"]
    assert found.skipped == {"": 1, ".csv": 2, ".json": 1}

    report_skipped(found.skipped)
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        "skipped 4 file(s) in the directories given, named as no type ragline reads "
        "(no suffix 1, .csv 2, .json 1); name a file on its own to have its content checked"
    )
    report_skipped({})
    assert capsys.readouterr().err == ""
    # Named on its own, a file is taken as it is and its content decides at submit.
    assert expand([str(root / "data.csv")]).files == [root / "data.csv"]
