"""Browser tests of the dashboard: Playwright on Debian's Chromium (headless), axe-core for
accessibility. Run by tests/e2e/dashboard_browser.rs against the real binary; by hand:

    KUDURRU_URL=http://127.0.0.1:8080/ KUDURRU_DNS=127.0.0.1:5353 KUDURRU_ADMIN=kdr_… \
    KUDURRU_VIEWER=kdr_… ~/.cache/kudurru/venv/bin/python tests/browser/dashboard.py

Environment: KUDURRU_URL (the API listener), KUDURRU_DNS (host:port of the UDP listener),
KUDURRU_ADMIN and KUDURRU_VIEWER (tokens), KUDURRU_SETTINGS_FILE (the node's settings file, to
check a dry run leaves it alone), KUDURRU_SHOTS (a directory: screenshots of every page at
desktop and phone width are written there), KUDURRU_CHROMIUM (default /usr/bin/chromium).
Prints one line per scenario and `N passed, N failed`; exits 1 on any failure.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request

import dns.message
import dns.rcode
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect, sync_playwright

URL = os.environ["KUDURRU_URL"].rstrip("/") + "/"
# The bearer-token calls (setup, checks) go here; the same listener unless a proxy is in front.
API = os.environ.get("KUDURRU_API", URL).rstrip("/") + "/"
DNS_HOST, DNS_PORT = os.environ["KUDURRU_DNS"].rsplit(":", 1)
ADMIN = os.environ["KUDURRU_ADMIN"]
VIEWER = os.environ["KUDURRU_VIEWER"]
SETTINGS_FILE = os.environ.get("KUDURRU_SETTINGS_FILE")
OPS = os.environ.get("KUDURRU_OPS")
SHOTS = os.environ.get("KUDURRU_SHOTS")
CHROMIUM = os.environ.get("KUDURRU_CHROMIUM", "/usr/bin/chromium")
BLOCKED = "dash-blocked.example"
OTHER = "dash-other.example"
LIST = "dash-ads"
PAGES = ["overview", "querylog", "blocklists", "clientgroups", "policies", "zones", "settings", "tools", "audit", "tokens"]
TIMEOUT_MS = 20_000

results = []


def step(name):
    def wrap(fn):
        def run(*args):
            started = time.monotonic()
            try:
                fn(*args)
                results.append((name, None))
                print(f"PASS {name} ({time.monotonic() - started:.1f} s)", flush=True)
            except Exception as e:  # noqa: BLE001 - every failure is reported, the run goes on
                results.append((name, e))
                print(f"FAIL {name}: {e}", flush=True)
                traceback.print_exc(limit=3)
        return run
    return wrap


def bearer(method, path, token=ADMIN, body=None):
    """The API with a bearer token: (status, JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(API + "api/v1" + path, data=data, method=method,
                                 headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            text = r.read()
            return r.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None


def eventually(what, check, limit=30.0):
    deadline = time.monotonic() + limit
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def dig(name):
    """dig's status and answer lines for an A query."""
    out = subprocess.run(["dig", "+time=2", "+tries=1", f"@{DNS_HOST}", "-p", DNS_PORT, name, "A"],
                         capture_output=True, text=True, timeout=15).stdout
    status = next((line.split("status: ")[1].split(",")[0] for line in out.splitlines() if "status: " in line), "none")
    answers = [line for line in out.splitlines() if line and not line.startswith(";") and "\tA\t" in line]
    return status, answers


def setup():
    for kind, body in [
        ("blocklists", {"kind": "BlockList", "metadata": {"name": LIST}, "spec": {"sources": [{"inline": [BLOCKED]}], "format": "domains"}}),
        ("policies", {"kind": "Policy", "metadata": {"name": "dash"}, "spec": {"clientGroups": ["default"], "denyLists": [LIST]}}),
        ("zones", {"kind": "Zone", "metadata": {"name": "dash-zone"},
                   "spec": {"zone": "dashzone.example.", "type": "primary", "nameServers": ["ns1.dashzone.example."], "soa": {"minimum": 30}}}),
    ]:
        status, answer = bearer("POST", f"/{kind}", body=body)
        assert status in (201, 409), (status, answer)
    eventually(f"{BLOCKED} blocked", lambda: dig(BLOCKED)[0] == "NXDOMAIN")
    assert dig(OTHER)[0] == "NOERROR"


def api_in_page(page, method, path, headers=None):
    return page.evaluate("""async ([m, p, h]) => {
        const r = await fetch('/api/v1' + p, {method: m, headers: h || {}, credentials: 'same-origin',
                                              body: m === 'GET' ? undefined : JSON.stringify({metadata: {annotations: {"kudurru.io/enabled": "false"}}})});
        let b = null; try { b = await r.json(); } catch {}
        return [r.status, b];
    }""", [method, path, headers])


def polls(page):
    return int(page.evaluate("document.body.dataset.polls || '0'"))


def goto(page, name):
    """Opens a page afresh (a reload when it is the current one: a hash change would not render
    it again)."""
    if page.url.endswith("#/" + name):
        page.reload()
    else:
        page.goto(URL + "#/" + name)
    page.wait_for_selector(f"body[data-page='{name}']", timeout=TIMEOUT_MS)


def sign_in(page, token):
    page.goto(URL)
    page.wait_for_selector("#signin #token", timeout=TIMEOUT_MS)
    page.fill("#token", token)
    page.click("#signin button[type=submit]")
    page.wait_for_selector("#nav:not([hidden])", timeout=TIMEOUT_MS)


@step("sign in: a bad token is refused at the field, a good one opens the overview")
def t_sign_in(page):
    page.goto(URL)
    page.wait_for_selector("#signin #token", timeout=TIMEOUT_MS)
    page.fill("#token", "kdr_00000000_nope")
    page.click("#signin button[type=submit]")
    expect(page.locator("#signin .field-error")).to_contain_text("not accepted", timeout=TIMEOUT_MS)
    expect(page.locator("#token")).to_have_attribute("aria-invalid", "true")
    # By keyboard: the field has focus, Enter submits.
    page.fill("#token", "")
    page.keyboard.type(ADMIN)
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-page='overview']", timeout=TIMEOUT_MS)
    expect(page.locator("#role")).to_contain_text("admin")
    cookies = {c["name"]: c for c in page.context.cookies()}
    assert cookies["kudurru_session"]["httpOnly"] and cookies["kudurru_session"]["sameSite"] == "Strict", cookies


def load(stop, sent):
    """UDP queries, one at a time and paced to at most about 300 a second (a flood would starve
    the other tests' servers on a shared machine), until `stop` (bounded by the caller)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.5)
    i = 0
    while not stop.is_set():
        i += 1
        q = dns.message.make_query(f"load-{i % 500}.dash.example", "A")
        try:
            s.sendto(q.to_wire(), (DNS_HOST, int(DNS_PORT)))
            s.recvfrom(4096)
        except OSError:
            pass
        sent[0] += 1
        time.sleep(0.003)
    s.close()


@step("overview: the queries-per-second figure rises while queries are sent")
def t_overview_qps(page):
    goto(page, "overview")
    eventually("two polls", lambda: polls(page) >= 2)
    before = float(page.inner_text("#qps").replace("—", "0"))
    answers_before, sources_before = answers_all(page), answers_by_source(page)
    stop, sent = threading.Event(), [0]
    worker = threading.Thread(target=load, args=(stop, sent), daemon=True)
    worker.start()
    try:
        def risen():
            text = page.inner_text("#qps").replace("—", "0")
            return float(text) if float(text) >= max(5.0, before * 2) else None
        after = eventually("the QPS figure to rise", risen, limit=40)

        # The data plane's figures (GET /api/v1/stats/live): QPS, by transport and by core,
        # upstream latency percentiles.
        def live_risen():
            text = page.inner_text("#live-qps").replace("—", "0").replace("…", "0")
            return float(text) if float(text) >= 5.0 else None
        live = eventually("the data plane's QPS figure to rise", live_risen, limit=40)
        udp = page.locator("#live tr", has_text="udp").first.inner_text().split()
        assert float(udp[1]) > 0, udp
        assert page.locator("#live table", has_text="by core").locator("tbody tr").count() >= 1
        expect(page.locator("#live-p50")).to_contain_text("ms")
        expect(page.locator("#live")).to_contain_text("p99")
        # Answer latency (kudurru_answer_latency_seconds) and answers by source move with the
        # load: more answers counted overall and on UDP, percentiles in ms, sources' totals up.
        answers = eventually("answers counted", lambda: answers_all(page) > answers_before + 5 and answers_all(page))
        udp_row = page.locator("#answer-latency tbody tr", has_text="udp").first.inner_text().split()
        assert int(udp_row[1]) > 0 and udp_row[2] != "—", udp_row
        expect(page.locator("#answer-p50")).to_contain_text("ms")
        expect(page.locator("#answer-p99")).to_contain_text("ms")
        sources = eventually("answers by source to move",
                             lambda: sum(answers_by_source(page).values()) > sum(sources_before.values()) and answers_by_source(page))
    finally:
        stop.set()
        worker.join(5)
    print(f"  qps before {before}, during load {after}, data plane {live}, upstream p50 "
          f"{page.inner_text('#live-p50')} ({sent[0]} queries sent); answers {answers_before} -> {answers}, "
          f"answer p50 {page.inner_text('#answer-p50')} p99 {page.inner_text('#answer-p99')}, by source {sources}")


def answers_all(page):
    """The overview's count of answers in the answer latency table's "all" row."""
    row = page.locator("#answer-latency tbody tr", has_text="all").first.inner_text().split()
    return int(row[1])


def answers_by_source(page):
    """The overview's answers-by-source totals (the table's last column), by source."""
    out = {}
    for row in page.locator("#answers-by-source tbody tr").all():
        cells = row.inner_text().split()
        out[cells[0]] = int(cells[-1])
    return out


@step("query log: search blocked queries and follow 'why blocked'")
def t_querylog_why(page):
    goto(page, "querylog")
    page.fill("#ql-search input[name=suffix]", BLOCKED)
    page.select_option("#ql-search select[name=blocked]", "true")
    page.click("#ql-search button[type=submit]")
    row = page.locator("#results tbody tr", has_text=BLOCKED).first
    expect(row).to_be_visible(timeout=TIMEOUT_MS)
    row.locator("button.why").click()
    expect(page.locator("#verdict")).to_contain_text("blocked", timeout=TIMEOUT_MS)
    expect(page.locator("#verdict")).to_contain_text(LIST)


@step("query log: the live tail shows a query as it is asked")
def t_querylog_tail(page):
    goto(page, "querylog")
    page.fill("#ql-search input[name=suffix]", "tail.dash.example")
    page.click("#tail")
    expect(page.locator("#tail")).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#results")).to_contain_text("Waiting", timeout=TIMEOUT_MS)
    name = f"t{int(time.time())}.tail.dash.example"
    # The tail starts when its request reaches the server: ask until the name shows.
    eventually("the tailed query", lambda: dig(name) and page.locator("#results tbody tr", has_text=name).count() > 0)
    page.click("#tail")
    expect(page.locator("#tail")).to_have_attribute("aria-pressed", "false")


@step("query log: one click blocks a name into a chosen list, and dig gets the block answer")
def t_querylog_block(page):
    goto(page, "querylog")
    page.fill("#ql-search input[name=qname]", OTHER)
    page.click("#ql-search button[type=submit]")
    row = page.locator("#results tbody tr", has_text=OTHER).first
    expect(row).to_be_visible(timeout=TIMEOUT_MS)
    page.select_option("#target-list", LIST)
    row.locator("button", has_text="Add to list").click()
    expect(page.locator("#status")).to_contain_text(f"added to {LIST}", timeout=TIMEOUT_MS)
    eventually(f"{OTHER} blocked", lambda: dig(OTHER)[0] == "NXDOMAIN")


@step("lists: disabling the block list stops dig getting the block answer; enabling restores it")
def t_disable_list(page):
    goto(page, "blocklists")
    toggle = page.locator(f"button[data-action=toggle][data-name={LIST}]")
    expect(toggle).to_have_text("Disable", timeout=TIMEOUT_MS)
    toggle.click()
    expect(page.locator(f"button[data-action=toggle][data-name={LIST}]")).to_have_text("Enable", timeout=TIMEOUT_MS)
    status, answers = eventually("the block answer to stop", lambda: (lambda r: r if r[0] == "NOERROR" and r[1] else None)(dig(BLOCKED)))
    assert answers, status
    page.locator(f"button[data-action=toggle][data-name={LIST}]").click()
    expect(page.locator(f"button[data-action=toggle][data-name={LIST}]")).to_have_text("Disable", timeout=TIMEOUT_MS)
    eventually("the block answer again", lambda: dig(BLOCKED)[0] == "NXDOMAIN")
    page.locator(f"button[data-action=refresh][data-name={LIST}]").click()
    expect(page.locator("#status")).to_contain_text("202", timeout=TIMEOUT_MS)


@step("lists: an invalid field shows the API's error at that field")
def t_invalid_object(page):
    goto(page, "clientgroups")
    page.click("#create")
    page.fill("#object-form input[name=name]", "dash-lab")
    page.fill("#object-form textarea[data-key='spec.clients']", "192.0.2.0/24\n10.0.0.0/33")
    page.click("#object-form button[type=submit]")
    field = page.locator("#object-form textarea[data-key='spec.clients']")
    expect(field).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT_MS)
    expect(page.locator("#object-form .field-error")).to_contain_text("spec.clients[1]")
    status, _ = bearer("GET", "/clientgroups/dash-lab")
    assert status == 404, status


def max_ttl():
    status, s = bearer("GET", "/settings")
    assert status == 200, status
    return s["values"]["cache"]["maxTTL"]


def settings_set(page, value):
    goto(page, "settings")
    page.fill("input[data-key='cache.maxTTL']", str(value))
    page.click("#review-btn")


@step("zones: the records editor sets a record that dig then gets, and the serial moves on")
def t_zones(page):
    goto(page, "zones")
    row = page.locator("#zones tbody tr", has_text="dash-zone")
    expect(row).to_be_visible(timeout=TIMEOUT_MS)
    row.locator("button", has_text="Records").click()
    heading = page.locator("#records h2").first
    expect(heading).to_contain_text("dashzone.example. at serial", timeout=TIMEOUT_MS)
    before = heading.inner_text()
    page.fill("#recordset-form input[data-key='spec.name']", "www")
    page.fill("#recordset-form textarea[data-key='spec.records']", "192.0.2.55")
    page.click("#recordset-form button[type=submit]")
    expect(page.locator("#status")).to_contain_text("saved", timeout=TIMEOUT_MS)
    eventually("the record served", lambda: any("192.0.2.55" in a for a in dig("www.dashzone.example")[1]))
    expect(page.locator("#records")).to_contain_text("192.0.2.55", timeout=TIMEOUT_MS)
    assert page.locator("#records h2").first.inner_text() != before


@step("zones: a zone-file import is previewed (nothing served), a bad line is shown at the field, then imported and served")
def t_zone_import(page):
    form = page.locator("#import-form")
    expect(form).to_be_visible(timeout=TIMEOUT_MS)
    page.fill("#import-form textarea[data-key=body]", "www 300 IN A 192.0.2.55\nmail 300 IN A 192.0.2.57\n")
    page.click("#import-form button[value=preview]")
    expect(page.locator("#import-result")).to_contain_text("Would change: 1 to create", timeout=TIMEOUT_MS)
    expect(page.locator("#import-result")).to_contain_text("mail", timeout=TIMEOUT_MS)
    status, answers = dig("mail.dashzone.example")
    assert status == "NXDOMAIN" and not answers, f"a preview served the record: {status} {answers}"
    page.fill("#import-form textarea[data-key=body]", "www 300 IN A 192.0.2.55\nmail 300 IN A not-an-address\n")
    page.click("#import-form button[value=import]")
    expect(form.locator(".field-error")).to_contain_text("import:2", timeout=TIMEOUT_MS)
    assert dig("mail.dashzone.example")[0] == "NXDOMAIN", "a refused import changed the zone"
    page.fill("#import-form textarea[data-key=body]", "www 300 IN A 192.0.2.55\nmail 300 IN A 192.0.2.57\n")
    page.click("#import-form button[value=import]")
    expect(page.locator("#import-result")).to_contain_text("Imported: 1 to create", timeout=TIMEOUT_MS)
    eventually("the imported record served", lambda: any("192.0.2.57" in a for a in dig("mail.dashzone.example")[1]))


@step("settings: an invalid value shows its error at the field and changes nothing")
def t_settings_invalid(page):
    old = max_ttl()
    settings_set(page, "soon")
    field = page.locator("input[data-key='cache.maxTTL']")
    expect(field).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT_MS)
    expect(page.locator("#settings-form .field-error")).to_contain_text("cache.maxTTL")
    assert max_ttl() == old


@step("settings: a dry run shows the diff and applies nothing until confirmed")
def t_settings_dry_run(page):
    old = max_ttl()
    file_before = open(SETTINGS_FILE, "rb").read() if SETTINGS_FILE else None
    settings_set(page, 777)
    review = page.locator("#review")
    expect(review).to_contain_text("Dry run", timeout=TIMEOUT_MS)
    row = review.locator("tr", has_text="cache.maxTTL")
    expect(row).to_contain_text(str(old))
    expect(row).to_contain_text("777")
    time.sleep(1)
    assert max_ttl() == old, "a dry run changed the value"
    if SETTINGS_FILE:
        assert open(SETTINGS_FILE, "rb").read() == file_before, "a dry run wrote the settings file"
    page.click("#apply")
    expect(page.locator("#status")).to_contain_text("Applied", timeout=TIMEOUT_MS)
    assert max_ttl() == 777
    if SETTINGS_FILE:
        assert b"777" in open(SETTINGS_FILE, "rb").read()


@step("settings: a rollback restores an earlier value")
def t_settings_rollback(page):
    settings_set(page, 888)
    expect(page.locator("#review")).to_contain_text("888", timeout=TIMEOUT_MS)
    page.click("#apply")
    expect(page.locator("#status")).to_contain_text("Applied", timeout=TIMEOUT_MS)
    assert max_ttl() == 888
    _, history = bearer("GET", "/settings/history")
    version = next(v["version"] for v in history["versions"]
                   if any(c["key"] == "cache.maxTTL" and c["new"] == 777 for c in v.get("changes", [])))
    goto(page, "settings")
    page.click(f"button[data-version='{version}']")
    expect(page.locator("#review")).to_contain_text("rollback", timeout=TIMEOUT_MS)
    assert max_ttl() == 888, "a rollback dry run changed the value"
    page.click("#apply-rollback")
    expect(page.locator("#status")).to_contain_text("Rolled back", timeout=TIMEOUT_MS)
    assert max_ttl() == 777
    _, after = bearer("GET", "/settings/history")
    assert after["versions"][0]["version"] > history["versions"][0]["version"], "the rollback is a new version"


@step("tools: a lookup through the node answers, and a blocked name gets the block answer")
def t_tools_lookup(page):
    goto(page, "tools")
    expect(page.locator("#lameduck")).to_contain_text("Serving")
    expect(page.locator("#lameduck-how")).to_contain_text("loopback")
    if OPS:
        # Lameduck entered on the ops listener shows on the page (GET /api/v1/lameduck).
        urllib.request.urlopen(urllib.request.Request(OPS + "lameduck", method="POST"), timeout=10).read()
        try:
            goto(page, "settings")
            goto(page, "tools")
            expect(page.locator("#lameduck")).to_contain_text("Lameduck", timeout=TIMEOUT_MS)
        finally:
            urllib.request.urlopen(urllib.request.Request(OPS + "lameduck", method="DELETE"), timeout=10).read()
        goto(page, "settings")
        goto(page, "tools")
        expect(page.locator("#lameduck")).to_contain_text("Serving", timeout=TIMEOUT_MS)
    page.fill("#lookup input[data-key=name]", "www.dashzone.example")
    page.click("#lookup button[type=submit]")
    expect(page.locator("#lookup-status")).to_contain_text("NOERROR", timeout=TIMEOUT_MS)
    expect(page.locator("#lookup-result")).to_contain_text("192.0.2.55")
    page.fill("#lookup input[data-key=name]", BLOCKED)
    page.click("#lookup button[type=submit]")
    expect(page.locator("#lookup-status")).to_contain_text("NXDOMAIN", timeout=TIMEOUT_MS)
    page.fill("#lookup input[data-key=type]", "NOPE")
    page.click("#lookup button[type=submit]")
    expect(page.locator("#lookup input[data-key=type]")).to_have_attribute("aria-invalid", "true", timeout=TIMEOUT_MS)


@step("tokens: an admin creates a token (shown once) and revokes it")
def t_tokens(page):
    goto(page, "tokens")
    page.fill("#token-form input[data-key=name]", "dash-test")
    page.select_option("#token-form select", "viewer")
    page.click("#token-form button[type=submit]")
    token = page.locator("#new-token .once").inner_text(timeout=TIMEOUT_MS).strip()
    assert token.startswith("kdr_"), token
    assert bearer("GET", "/settings", token=token)[0] == 200
    tid = token.split("_")[1]
    page.once("dialog", lambda d: d.accept())
    page.locator("tr", has_text=tid).locator("button", has_text="Revoke").click()
    expect(page.locator("#status")).to_contain_text("revoked", timeout=TIMEOUT_MS)
    assert bearer("GET", "/settings", token=token)[0] == 401


@step("accessibility: axe-core finds no serious or critical violation on any page, light and dark")
def t_axe(page):
    axe = Axe()
    bad = []
    page.context.clear_cookies()
    page.goto(URL)
    page.wait_for_selector("#signin #token", timeout=TIMEOUT_MS)
    pages = ["signin"] + PAGES
    sign_in_done = False
    for name in pages:
        if name != "signin":
            if not sign_in_done:
                sign_in(page, ADMIN)
                sign_in_done = True
            goto(page, name)
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            found = axe.run(page).response["violations"]
            serious = [v for v in found if v.get("impact") in ("serious", "critical")]
            for v in found:
                print(f"  axe {name} ({scheme}): {v['impact']} {v['id']}: {v['help']} ({len(v['nodes'])} nodes)")
            bad += [(name, scheme, v["id"]) for v in serious]
    page.emulate_media(color_scheme="light")
    assert not bad, bad


def screenshots(browser):
    if not SHOTS:
        return
    os.makedirs(SHOTS, exist_ok=True)
    for label, size in [("desktop", {"width": 1280, "height": 800}), ("phone", {"width": 375, "height": 812})]:
        ctx = browser.new_context(viewport=size, color_scheme="light")
        page = ctx.new_page()
        page.goto(URL)
        page.wait_for_selector("#signin #token", timeout=TIMEOUT_MS)
        page.screenshot(path=os.path.join(SHOTS, f"signin-{label}.png"))
        sign_in(page, ADMIN)
        for name in PAGES:
            goto(page, name)
            if name == "overview":
                eventually("a poll", lambda: polls(page) >= 1)
            page.screenshot(path=os.path.join(SHOTS, f"{name}-{label}.png"))
        ctx.close()
    print(f"  screenshots in {SHOTS}")


@step("viewer: no write controls, and a forged write from the page is refused")
def t_viewer(browser):
    ctx = browser.new_context()
    page = ctx.new_page()
    try:
        sign_in(page, VIEWER)
        expect(page.locator("#role")).to_contain_text("viewer")
        nav = page.locator("#nav").inner_text()
        assert "Tokens" not in nav and "Audit" not in nav, nav
        goto(page, "blocklists")
        expect(page.locator("#objects tbody tr", has_text=LIST)).to_be_visible(timeout=TIMEOUT_MS)
        assert page.locator("#create").count() == 0
        assert page.locator("button[data-action]").count() == 0
        goto(page, "settings")
        assert page.locator("#settings-form input").count() == 0
        assert page.locator("#review-btn").count() == 0
        status, session = api_in_page(page, "GET", "/session")
        assert status == 200 and session["role"] == "viewer", (status, session)
        forged = api_in_page(page, "PATCH", f"/blocklists/{LIST}",
                             {"Content-Type": "application/json", "X-CSRF-Token": session.get("csrfToken", "")})
        assert forged[0] == 403, forged
        no_csrf = api_in_page(page, "PATCH", f"/blocklists/{LIST}", {"Content-Type": "application/json"})
        assert no_csrf[0] == 403, no_csrf
        _, obj = bearer("GET", f"/blocklists/{LIST}")
        assert (obj["metadata"].get("annotations") or {}).get("kudurru.io/enabled") is None, obj["metadata"]
    finally:
        ctx.close()


@step("sign out: the session ends on the server and the sign-in page returns")
def t_sign_out(page):
    goto(page, "overview")
    page.click("#signout")
    page.wait_for_selector("#signin #token", timeout=TIMEOUT_MS)
    status, _ = api_in_page(page, "GET", "/session")
    assert status == 401, status
    page.goto(URL + "#/settings")
    page.wait_for_selector("#signin #token", timeout=TIMEOUT_MS)


def main():
    setup()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-dev-shm-usage"])
        ctx = browser.new_context(viewport={"width": 1280, "height": 800}, color_scheme="light")
        ctx.set_default_timeout(TIMEOUT_MS)
        page = ctx.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "Content Security Policy" in m.text else None)
        t_sign_in(page)
        t_overview_qps(page)
        t_querylog_why(page)
        t_querylog_tail(page)
        t_querylog_block(page)
        t_disable_list(page)
        t_invalid_object(page)
        t_zones(page)
        t_zone_import(page)
        t_settings_invalid(page)
        t_settings_dry_run(page)
        t_settings_rollback(page)
        t_tools_lookup(page)
        t_tokens(page)
        t_axe(page)
        t_viewer(browser)
        t_sign_out(page)
        screenshots(browser)
        if errors:
            results.append(("no script errors or CSP violations in the page", AssertionError(errors)))
            print(f"FAIL script errors or CSP violations: {errors}")
        browser.close()
    failed = sum(1 for _, e in results if e)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
