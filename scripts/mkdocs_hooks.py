"""MkDocs hook: links from docs/ to the repository's other files (``../README.md#quick-start``).

On GitHub such a link opens the file; the site holds only docs/, so MkDocs would call it not found.
Here each one is checked instead (the file exists, and a Markdown file has the heading its anchor
names, in GitHub's spelling) and written as the file's repository path in code, so a wrong path or
a stale anchor still fails ``mkdocs build --strict`` and the pages need no second spelling.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any

from mkdocs.exceptions import PluginError

_OUTSIDE = re.compile(r"\[([^\]]+)\]\((\.\./[^)#\s]+)(#[^)\s]*)?\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def markdown_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a Markdown file: one per heading, and each explicit ``<a id>``."""
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    found = {_github_slug(heading) for heading in _HEADING.findall(text)}
    found.update(re.findall(r"<a id=\"([^\"]+)\"", text))
    return found


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Each ``[text](../path#anchor)`` checked and written as ``text (`path`)``."""
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    source = PurePosixPath(page.file.src_uri).parent

    def repo_path(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        resolved = (docs_dir / source / target).resolve()
        where = f"{page.file.src_uri}: link {target}{anchor}"
        if not resolved.is_relative_to(root) or not resolved.exists():
            raise PluginError(f"{where} names no file of the repository")
        if anchor and resolved.suffix == ".md" and anchor[1:] not in markdown_anchors(resolved):
            raise PluginError(f"{where}: {resolved.name} has no heading for {anchor}")
        shown = f"`{resolved.relative_to(root).as_posix()}{anchor}`"
        return shown if text.strip("`") in (resolved.name, shown.strip("`")) else f"{text} ({shown})"

    return _OUTSIDE.sub(repo_path, markdown)
