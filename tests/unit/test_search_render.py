"""Search replies, as the owner reads them in Telegram (inventory §5.2)."""

from messageweave.mail.jmap import EmailMeta, SearchResult, SearchSnippet
from messageweave.pipeline.search import clean_snippet, search_reply, truncate


def meta(email_id: str, subject: str | None) -> EmailMeta:
    return EmailMeta(id=email_id, sender=None, subject=subject, received_at=None,
                     mailbox_ids=frozenset(), keywords=frozenset(), preview="")


def test_no_hits() -> None:
    reply = search_reply("发票", SearchResult(ids=[], emails=[], snippets=[]))
    assert reply == "没有找到匹配「发票」的邮件。"


def test_hits_with_snippets_list_subject_id_and_preview() -> None:
    result = SearchResult(
        ids=["M1", "M2"],
        emails=[meta("M1", "March invoice"), meta("M2", "Hello")],
        snippets=[SearchSnippet("M1", "March <mark>invoice</mark>",
                                "the <mark>invoice</mark> &amp; receipt"),
                  SearchSnippet("M2", None, None)],
    )
    assert search_reply("invoice", result) == (
        "搜索「invoice」：共 2 封匹配邮件\n"
        "- March invoice（M1）\n"
        "  the invoice & receipt\n"
        "- Hello（M2）"
    )


def test_without_snippets_the_ids_are_listed() -> None:
    result = SearchResult(ids=["a1", "b2"], emails=[], snippets=[])
    assert search_reply("x", result) == (
        "搜索「x」：共 2 封匹配邮件\n（高亮片段暂不可用，以下为匹配的邮件 ID）\n- a1\n- b2"
    )


def test_a_mail_without_any_subject_shows_the_placeholder() -> None:
    result = SearchResult(ids=["a1"], emails=[meta("a1", None)],
                          snippets=[SearchSnippet("a1", None, "body <mark>hit</mark>")])
    assert search_reply("hit", result) == (
        "搜索「hit」：共 1 封匹配邮件\n- （无主题）（a1）\n  body hit"
    )


def test_long_subject_and_preview_are_cut_with_an_ellipsis() -> None:
    subject, preview = "主" * 130, "文" * 170
    result = SearchResult(ids=["a1"], emails=[],
                          snippets=[SearchSnippet("a1", subject, preview)])
    lines = search_reply("主", result).split("\n")
    assert lines[1] == "- " + "主" * 120 + "…（a1）"
    assert lines[2] == "  " + "文" * 160 + "…"
    assert truncate("a" * 120, 120) == "a" * 120


def test_at_most_ten_hits_are_shown() -> None:
    ids = [f"m{i}" for i in range(12)]
    result = SearchResult(ids=ids, emails=[],
                          snippets=[SearchSnippet(i, f"s{i}", None) for i in ids])
    lines = search_reply("s", result).split("\n")
    assert lines[0] == "搜索「s」：共 10 封匹配邮件"
    assert len(lines) == 11 and lines[-1] == "- sm9（m9）"


def test_cleaning_strips_marks_then_decodes_entities_once() -> None:
    assert clean_snippet("<MARK>a</Mark> <mark>b") == "a b"
    assert clean_snippet("&lt;b&gt; &quot;x&quot; &#39;y&apos; &amp;") == "<b> \"x\" 'y' &"
    assert clean_snippet("&amp;lt;") == "&lt;"
    assert clean_snippet("&lt;mark&gt;") == "<mark>"
    assert clean_snippet("&nbsp; &#40;") == "&nbsp; &#40;"
