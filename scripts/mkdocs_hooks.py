"""MkDocs hook: the repository's Markdown outside docs/ joins the site, and links to it work.

On GitHub a link from docs/ to ``../README.md#quick-start`` opens the file; the site holds only
docs/, so MkDocs would call it not found (and this hook once printed such links as code).
Instead the README, the changelog, the threat model and the Helm chart's README are added to the
site as pages of their own (:data:`INCLUDED`, under ``project/``), and every link to one of them,
from docs/ or from each other, is rewritten to that page; their own links into docs/ are
rewritten to the site's pages.
A link to any other file of the repository (a test, a script) is checked (the file exists, and a
Markdown file has the heading its anchor names, in GitHub's spelling) and shown as the file's
repository path in code, so a wrong path or a stale anchor still fails ``mkdocs build --strict``
and the pages need no second spelling.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path, PurePosixPath
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

INCLUDED = {
    "README.md": "project/readme.md",
    "CHANGELOG.md": "project/changelog.md",
    "THREAT_MODEL.md": "project/threat-model.md",
    "deploy/helm/pact-gateway/README.md": "project/helm-chart.md",
}
"""Repository path of each Markdown file outside docs/ → its page in the site (``nav`` names them)."""

_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|mailto:|#)([^)#\s]+)(#[^)\s]*)?\)")
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


def on_files(files: Files, config: Any) -> Files:
    """Each file of :data:`INCLUDED` added as a page, read from its place in the repository."""
    root = Path(config["docs_dir"]).resolve().parent
    for source, page in INCLUDED.items():
        path = root / source
        if not path.is_file():
            raise PluginError(f"{source}: not found beside docs/, so the site cannot include it")
        files.append(File.generated(config, page, abs_src_path=str(path)))
    return files


def _repository_path(src_uri: str) -> PurePosixPath:
    """Where a page of the site lives in the repository: docs/… or the included file's own path."""
    for source, page in INCLUDED.items():
        if page == src_uri:
            return PurePosixPath(source)
    return PurePosixPath("docs") / src_uri


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Each relative link that leaves docs/ rewritten: to an included page, to a page of docs/ (from
    an included page), or checked and written as ``text (`path`)`` for any other repository file."""
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    here = _repository_path(page.file.src_uri)
    page_dir = posixpath.dirname(page.file.src_uri)
    pages_by_source = {root / source: page_uri for source, page_uri in INCLUDED.items()}

    def rewrite(match: re.Match[str]) -> str:
        text, target, anchor = match.group(1), match.group(2), match.group(3) or ""
        resolved = (root / here.parent / target).resolve()
        where = f"{here}: link {target}{anchor}"
        if resolved.is_relative_to(docs_dir):
            if here.parts[0] == "docs":
                return match.group(0)  # a page linking a page: MkDocs checks it itself
            site_uri = resolved.relative_to(docs_dir).as_posix()
            return f"[{text}]({posixpath.relpath(site_uri, page_dir or '.')}{anchor})"
        if not resolved.is_relative_to(root) or not resolved.exists():
            raise PluginError(f"{where} names no file of the repository")
        if anchor and resolved.suffix == ".md" and anchor[1:] not in markdown_anchors(resolved):
            raise PluginError(f"{where}: {resolved.name} has no heading for {anchor}")
        if resolved in pages_by_source:
            site_uri = pages_by_source[resolved]
            return f"[{text}]({posixpath.relpath(site_uri, page_dir or '.')}{anchor})"
        shown = f"`{resolved.relative_to(root).as_posix()}{anchor}`"
        return shown if text.strip("`") in (resolved.name, shown.strip("`")) else f"{text} ({shown})"

    # Fenced blocks are code: a ``](`` in a shell line is no link.
    pieces, start = [], 0
    for fence in _FENCE.finditer(markdown):
        pieces += [_LINK.sub(rewrite, markdown[start : fence.start()]), fence.group(0)]
        start = fence.end()
    return "".join([*pieces, _LINK.sub(rewrite, markdown[start:])])
