"""The dashboard's directory of owners (``GET /v1/dashboard/owners``) through
``JobApi``: listed, sorted by its headers, paged, searched by key prefix,
escaped, and refused like the rest of the dashboard."""

from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

from tests.api.test_dashboard import COOKIE, HOSTILE, assert_html, get, text
from tests.api.test_routes import TOKEN, Owners
from tickwork.api import JobApi
from tickwork.directory import DEAD_LETTER_COUNT_CAP, OwnerPage, OwnerQuery, OwnerSummary, page_of

NOW = 1_767_000_000_000


class Listed:
    """A directory of fixed summaries, paged as tickwork serve pages its own."""

    def __init__(self, summaries: list[OwnerSummary]) -> None:
        self.summaries = summaries
        self.queries: list[OwnerQuery] = []

    async def list_owners(self, query: OwnerQuery) -> OwnerPage:
        self.queries.append(query)
        return page_of(self.summaries, query)


def owner(key: str, queued: int = 0, running: int = 0, overdue: int = 0,
          dead_letters: int = 0) -> OwnerSummary:
    return OwnerSummary(key, queued, running, overdue, dead_letters, NOW - 5_000, NOW)


def api_over(*summaries: OwnerSummary) -> tuple[JobApi, Listed]:
    listed = Listed(list(summaries))
    return JobApi(token=TOKEN, owners=Owners(), directory=listed), listed


def rows(page: str) -> list[str]:
    return [html.unescape(key) for key in re.findall(r'<tr data-owner="([^"]*)"', page)]


def next_link(page: str) -> str | None:
    found = re.search(r'<a rel="next" href="([^"]*)"', page)
    return None if found is None else html.unescape(found.group(1))


async def follow(api: JobApi, link: str) -> str:
    parts = urlsplit(link)
    response = await get(api, parts.path, COOKIE, query=parts.query)
    assert response.status == 200, text(response)
    return text(response)


async def test_the_picker_links_to_the_directory() -> None:
    api, _ = api_over()
    assert 'href="/v1/dashboard/owners"' in text(await get(api, "/v1/dashboard", COOKIE))


async def test_owners_are_listed_with_their_summary_and_a_link_to_their_page() -> None:
    api, _ = api_over(owner("acme", queued=3, overdue=2),
                      owner("beta", running=1, dead_letters=DEAD_LETTER_COUNT_CAP),
                      owner(HOSTILE))
    response = await get(api, "/v1/dashboard/owners", COOKIE)
    assert_html(response)
    page = text(response)
    assert rows(page) == sorted(["acme", "beta", HOSTILE])
    assert "<script>alert" not in page  # every key escaped
    assert 'href="/v1/owners/acme/dashboard"' in page
    assert f"{DEAD_LETTER_COUNT_CAP:,}+" in page  # at the cap: "at least"
    acme = page[page.index('<tr data-owner="acme"'):]
    acme = acme[:acme.index("</tr>")]
    assert re.findall(r'data-label="(queued|running|overdue)">(\d+)<', acme) == [
        ("queued", "3"), ("running", "0"), ("overdue", "2")]
    assert 'aria-sort="ascending">owner<' in page


async def test_headers_sort_and_the_next_page_goes_on_in_the_same_order() -> None:
    summaries = [owner(f"o{index:02}", queued=index % 4) for index in range(60)]
    api, listed = api_over(*summaries)
    page = await follow(api, "/v1/dashboard/owners")
    sort_link = re.search(r'<a href="([^"]*sort=queued[^"]*)">queued</a>', page)
    assert sort_link is not None
    seen: list[str] = []
    link: str | None = html.unescape(sort_link.group(1))
    while link is not None:
        page = await follow(api, link)
        assert 'aria-sort="descending">queued<' in page
        seen += rows(page)
        link = next_link(page)
    assert seen == [summary.key for summary in sorted(
        summaries, key=lambda summary: (summary.queued, summary.key), reverse=True)]
    assert [query.sort for query in listed.queries[1:]] == ["queued", "queued"]
    assert "First page" in page


async def test_a_prefix_search_keeps_its_text_and_says_when_nothing_matches() -> None:
    api, listed = api_over(owner("acme"), owner("acme-eu"), owner("zeta"))
    page = await follow(api, "/v1/dashboard/owners?prefix=acme&sort=key")
    assert rows(page) == ["acme", "acme-eu"]
    assert 'name="prefix" value="acme"' in page
    assert listed.queries[-1] == OwnerQuery(prefix="acme")
    page = await follow(api, "/v1/dashboard/owners?prefix=%3Cnobody%3E")
    assert rows(page) == [] and "starts with \u201c&lt;nobody&gt;\u201d" in page


async def test_bad_queries_are_refused_naming_the_parameter() -> None:
    api, listed = api_over(owner("acme"))
    for query, field in (("sort=size", "sort"), ("cursor=queued%3A1%3Aa", "cursor"),
                         ("owner=acme", "query")):
        response = await get(api, "/v1/dashboard/owners", COOKIE, query=query)
        assert response.status == 400, query
        assert_html(response)
        assert field in text(response)
    assert listed.queries == []  # refused before the directory was asked


async def test_without_a_session_or_a_directory() -> None:
    api, listed = api_over(owner("acme"))
    response = await get(api, "/v1/dashboard/owners")
    assert (response.status, response.all_headers()["location"]) == (303, "/v1/dashboard")
    assert listed.queries == []
    bare = JobApi(token=TOKEN, owners=Owners())
    response = await get(bare, "/v1/dashboard/owners", COOKIE)
    assert response.status == 404
    assert "keeps no directory of owners" in text(response)
