"""The web explorer's one escaping helper (`chalk.faces.web.shown`) and its upload limit, without a browser.

Issue 26: an uploaded config whose model_type held markdown image/link markup became an <img> fetched from a
foreign host and a link inside st.error, and the error showed the server's private upload folder.
"""

from __future__ import annotations

import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chalk.errors import ChalkError, InputError
from chalk.faces import web

HOSTILE = "![t](http://host/x.png) [CLICK](http://evil.example) <img src=x onerror=alert(1)> www.evil.example " \
          ":red[x] $x^2$ <b>bold</b> `code` a@b.example"
LLAMA = Path(__file__).resolve().parents[1] / "src/chalk/catalog/models/llama-3.1-8b/config.json"


def _html(md: str) -> str:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).render(md)


def test_escaped_markup_renders_as_literal_text():
    out = web.md_escape(HOSTILE)
    html = _html(out)
    assert "<img" not in html and "<a " not in html and "<b>" not in html and "<code>" not in html
    # every punctuation mark is escaped, so GFM autolinks (scheme://, www., mail) and directives cannot start
    assert "://" not in out and "www." not in out and ":red[" not in out and "a@b" not in out
    from markdown_it import MarkdownIt

    text = "".join(t.content for tok in MarkdownIt("commonmark").parse(out) for t in (tok.children or [])
                   if t.type == "text")
    assert text == HOSTILE


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=string.printable.replace("\n", "").replace("\r", "").replace("\x0b", "")
               .replace("\x0c", "").replace("\t", ""), max_size=60))
def test_any_printable_line_escapes_to_itself(s):
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark", {"html": True}).parse(web.md_escape(s))
    kinds = {t.type for tok in tokens for t in (tok.children or [])}
    assert kinds <= {"text", "softbreak"}, kinds
    text = "".join(t.content for tok in tokens for t in (tok.children or []) if t.type == "text")
    assert text == s.strip(" ")  # markdown trims a paragraph's outer spaces; nothing else changes


def _inline(md: str):
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark", {"html": True}).parse(md)
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close"]
    return tokens[1].children


def test_shown_is_one_literal_code_span():
    """shown() is what the page uses: a code span, since GFM autolinks survive backslash escapes (Streamlit
    turned the escaped `http\\:\\/\\/evil\\.example` into a link in the browser test)."""
    kids = _inline(web.shown(HOSTILE))
    assert [k.type for k in kids] == ["code_inline"] and kids[0].content == HOSTILE
    assert web.shown("") == ""
    kids = _inline(web.shown("a ``b`` c\n\n# heading\r\n- item"))
    assert [k.type for k in kids] == ["code_inline"] and kids[0].content == "a ``b`` c  # heading  - item"


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=60).filter(lambda s: s.strip(" \r\n\v\f\x85\u2028\u2029\t")))
def test_any_text_is_one_code_span_with_the_same_characters(s):
    import re

    kids = _inline(web.code_span(s))
    assert [k.type for k in kids] == ["code_inline"]
    flat = re.sub(r"[\r\n\v\f\x85\u2028\u2029]", " ", s).replace("\0", "\ufffd")
    assert kids[0].content == flat


class _Upload:
    def __init__(self, name, data):
        self.name, self._data, self.size = name, data, len(data)

    def getvalue(self):
        return self._data


def test_hostile_upload_error_shows_the_file_name_not_the_server_folder():
    from chalk import api
    from chalk.faces.web_app import _uploaded_model

    cfg = json.loads(LLAMA.read_text())
    cfg["model_type"] = "![t](http://host/x.png) [CLICK](http://evil.example)"
    path = _uploaded_model(_Upload("hostile.json", json.dumps(cfg).encode()))
    assert str(web.upload_root()) in path
    with pytest.raises(ChalkError) as e:
        api.estimate(path, "hgx-h100", 64, 4096)
    assert str(web.upload_root()) in str(e.value)  # the library names the path; the page must not
    out = web.shown(e.value)
    assert str(web.upload_root()) not in out and "chalk-web-" not in out
    assert out.startswith("` hostile.json: unsupported model_type")
    assert [k.type for k in _inline(out)] == ["code_inline"]


def test_upload_over_the_limit_is_refused_before_parsing_or_writing():
    from chalk.faces.web_app import _uploaded_model

    before = set(web.upload_root().iterdir())
    with pytest.raises(InputError, match="at most 1,048,576 bytes"):
        _uploaded_model(_Upload("big.json", b"{" + b" " * web.MAX_UPLOAD_BYTES + b"}"))
    assert set(web.upload_root().iterdir()) == before
    up = _Upload("liar.json", b"{" + b" " * web.MAX_UPLOAD_BYTES + b"}")
    up.size = 10  # a size that lies: the bytes are checked too
    with pytest.raises(InputError):
        _uploaded_model(up)


def test_streamlit_is_launched_with_the_upload_limit_in_megabytes():
    cmd = web.command("127.0.0.1", 8765)
    assert cmd[cmd.index("--server.maxUploadSize") + 1] == "1"
    assert web.MAX_UPLOAD_BYTES == 1 << 20
