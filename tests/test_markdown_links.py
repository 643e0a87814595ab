"""Every Markdown link in the repository resolves, and none leaves the repository.

Relative links must name a file or folder of the repository; ``#anchors`` must name a
heading of the Markdown file they point into (GitHub's slugs) or a line of another file
(``#L12``, ``#L12-L20``). Links to web addresses are not fetched (the suite stays on
loopback). Links inside code blocks and code spans are not links.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Folders that are not the project's own text (installed packages, caches, run output).
SKIP_DIRS = {".git", ".venv", "node_modules", "build", "dist", "jvm", "spark-warehouse"}

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"""<a\s+(?:name|id)=["']([^"']+)["']""")
_LINE_ANCHOR = re.compile(r"^L(\d+)(?:-L(\d+))?$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files(root: Path) -> list[Path]:
    """The Markdown files of the project: git's view when there is one, else a walk."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
        files = [root / name for name in listed]
    except (OSError, subprocess.CalledProcessError):
        files = list(root.rglob("*.md"))
    return sorted(
        f
        for f in files
        if f.is_file()
        and not (set(f.relative_to(root).parts[:-1]) & SKIP_DIRS)
        and not any(part.startswith(".") for part in f.relative_to(root).parts[:-1])
    )


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every inline, image and reference link outside code."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        line = _CODE_SPAN.sub("", line)
        found += [(number, m.group(1)) for m in _INLINE.finditer(line)]
        ref = _REFERENCE.match(line)
        if ref:
            found.append((number, ref.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: plain text, lower case, punctuation out, - for spaces."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor a Markdown file offers (headings, numbered on repeats, and HTML ones)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        out.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def problems(root: Path, path: Path) -> list[str]:
    """What is wrong with the links of one Markdown file (empty when all resolve)."""
    root = root.resolve()
    text = path.read_text(encoding="utf-8")
    wrong = []
    for number, raw in links(text):
        where = f"{path.relative_to(root)}:{number}: {raw}"
        if _SCHEME.match(raw) or raw.startswith("//"):
            continue  # a web address (or mailto:): not fetched
        target, _, anchor = unquote(raw).partition("#")
        dest = (path.parent / target).resolve() if target else path.resolve()
        if not dest.is_relative_to(root):
            wrong.append(f"{where}: points outside the repository")
            continue
        if not dest.exists():
            wrong.append(f"{where}: no such file")
            continue
        if not anchor:
            continue
        if dest.suffix == ".md":
            if anchor not in anchors(dest.read_text(encoding="utf-8")):
                wrong.append(f"{where}: no heading with anchor #{anchor}")
        elif dest.is_file():
            lines = _LINE_ANCHOR.match(anchor)
            count = len(dest.read_text(errors="replace").splitlines())
            if not lines or int(lines.group(2) or lines.group(1)) > count:
                wrong.append(f"{where}: #{anchor} is not a line of the file")
        else:
            wrong.append(f"{where}: a folder has no anchors")
    return wrong


FILES = markdown_files(ROOT)


def test_the_repository_has_markdown_to_check():
    names = {f.relative_to(ROOT).as_posix() for f in FILES}
    assert {"README.md", "docs/design.md", "docs/quickstart.md"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_link_resolves(path: Path):
    assert problems(ROOT, path) == []


def test_the_checker_reports_every_kind_of_broken_link(tmp_path: Path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "code.py").write_text("a = 1\nb = 2\n")
    (repo / "docs" / "guide.md").write_text(
        '# Guide\n\n## Set `up` (fast)\n\n## Set up (fast)\n<a id="custom"></a>\n'
    )
    (repo / "README.md").write_text(
        "\n".join(
            [
                "[ok](docs/guide.md) [ok](docs/guide.md#set-up-fast)",
                "[ok](docs/guide.md#set-up-fast-1) [ok](docs/guide.md#custom)",
                "[ok](code.py#L2) [ok](https://example.com/x) [ok](#readme-title)",
                "# Readme title",
                "`[not a link](nowhere.md)`",
                "```",
                "[not a link](nowhere.md)",
                "```",
                "[missing](docs/nope.md)",
                "[bad anchor](docs/guide.md#setup)",
                "[bad line](code.py#L9)",
                "![outside](../elsewhere/picture.png)",
                "[ref]: docs/gone.md",
            ]
        )
        + "\n"
    )
    wrong = problems(repo, repo / "README.md")
    assert [w.split(": ", 2)[1] for w in wrong] == [
        "docs/nope.md",
        "docs/guide.md#setup",
        "code.py#L9",
        "../elsewhere/picture.png",
        "docs/gone.md",
    ], wrong
