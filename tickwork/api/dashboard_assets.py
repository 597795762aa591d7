"""The dashboard's stylesheet and script, as text constants.

Constants rather than package data files: the Worker imports the vendored
package under Pyodide, where a module is always there and a data file is
one more thing the bundle must carry. They hold no data, so they are served
without a token (``GET /v1/dashboard/static/<name>``).
"""

from __future__ import annotations

CSS = """\
:root { color-scheme: light dark; --fg: #1b1f24; --muted: #5b6570; --bg: #ffffff;
  --panel: #f4f6f8; --line: #d5dae0; --accent: #0b5cad; --bad: #b3261e; --ok: #1e7b34;
  --warn: #8a5a00; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e9ec; --muted: #9aa4ae; --bg: #111418; --panel: #1b2027;
    --line: #323a44; --accent: #6cb0ff; --bad: #ff8a80; --ok: #7bd88f; --warn: #f0c060; }
}
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif;
  color: var(--fg); background: var(--bg); }
header { display: flex; flex-wrap: wrap; align-items: center; gap: .5rem 1rem;
  padding: .6rem 1rem; border-bottom: 1px solid var(--line); background: var(--panel); }
header h1 { font-size: 1.1rem; margin: 0; flex: 1 1 auto; }
header .scope { font-weight: normal; color: var(--muted); word-break: break-all; }
main { padding: .5rem 1rem 2rem; max-width: 80rem; margin: 0 auto; }
section { margin: 1.2rem 0; }
h2 { font-size: 1.05rem; margin: 0 0 .5rem; }
h3 { font-size: .95rem; margin: .8rem 0 .3rem; color: var(--muted); }
.scroll { overflow-x: auto; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { color: var(--muted); font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code, .id { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .85rem;
  word-break: break-all; }
.payload { color: var(--muted); }
pre { white-space: pre-wrap; word-break: break-word; background: var(--panel);
  padding: .4rem .6rem; border-radius: 4px; max-height: 14rem; overflow: auto; margin: .3rem 0; }
.queue { border: 1px solid var(--line); border-radius: 6px; padding: .6rem .8rem;
  margin: .8rem 0; }
.queue > h3:first-child { margin-top: 0; color: var(--fg); font-size: 1rem; }
.badge { display: inline-block; padding: 0 .4rem; border-radius: 3px; font-size: .8rem;
  border: 1px solid var(--line); }
.badge.paused { color: var(--warn); border-color: var(--warn); }
.badge.overdue { color: var(--bad); border-color: var(--bad); }
.badge.failed { color: var(--bad); border-color: var(--bad); }
.flash { padding: .5rem .8rem; border-left: 4px solid var(--accent); background: var(--panel);
  margin: .8rem 0; }
.flash.error { border-color: var(--bad); }
.muted { color: var(--muted); }
form.inline { display: inline; margin: 0; }
button, input[type=submit] { font: inherit; padding: .3rem .7rem; border-radius: 4px;
  border: 1px solid var(--line); background: var(--bg); color: var(--fg); cursor: pointer;
  min-height: 2rem; }
button.danger { color: var(--bad); border-color: var(--bad); }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
input[type=text], input[type=password] { font: inherit; padding: .35rem .5rem;
  border: 1px solid var(--line); border-radius: 4px; background: var(--bg); color: var(--fg);
  width: 100%; max-width: 24rem; }
.login { max-width: 26rem; margin: 3rem auto; padding: 0 1rem; }
.login label { display: block; margin: .6rem 0 .2rem; }
.login p { margin: .6rem 0; }
label.toggle { font-size: .9rem; color: var(--muted); white-space: nowrap; }
form.search { display: flex; flex-wrap: wrap; align-items: center; gap: .4rem .6rem;
  margin: .8rem 0; }
form.search input[type=text] { flex: 1 1 12rem; }
select { font: inherit; padding: .3rem .4rem; border: 1px solid var(--line);
  border-radius: 4px; background: var(--bg); color: var(--fg); min-height: 2rem; }
td.alert { color: var(--bad); font-weight: 600; }
nav.pager { display: flex; gap: 1rem; margin: .8rem 0; }
/* History charts: inline SVG drawn by the server, coloured by class. */
.charts { display: flex; flex-wrap: wrap; gap: .4rem 1rem; margin: .3rem 0 .6rem; }
.chart { flex: 1 1 16rem; min-width: 0; margin: 0; }
.chart figcaption { font-size: .85rem; color: var(--muted); }
.chart svg { display: block; width: 100%; height: 4.5rem; background: var(--panel);
  border: 1px solid var(--line); border-radius: 3px; }
.chart .axis { stroke: var(--line); }
.chart polyline { fill: none; stroke-width: 1.5; }
.chart circle { stroke: none; }
.chart .scale { display: flex; justify-content: space-between; font-size: .75rem;
  color: var(--muted); }
.key { white-space: nowrap; margin-left: .5rem; }
.key::before { content: ""; display: inline-block; width: .7rem; height: .2rem;
  margin-right: .2rem; vertical-align: middle; background: currentColor; }
.enqueued { color: var(--accent); stroke: var(--accent); fill: var(--accent); }
.completed { color: var(--ok); stroke: var(--ok); fill: var(--ok); }
.failed { color: var(--bad); stroke: var(--bad); fill: var(--bad); }
.retried { color: var(--warn); stroke: var(--warn); fill: var(--warn); }
.depth { color: var(--fg); stroke: var(--fg); fill: var(--fg); }
@media (max-width: 40rem) {
  main { padding: .3rem .5rem 2rem; }
  header { padding: .5rem; }
  table.stack thead { display: none; }
  table.stack, table.stack tbody { display: block; width: 100%; }
  /* A row becomes a card: short cells flow side by side, long ones take a line. */
  table.stack tr { display: flex; flex-wrap: wrap; gap: 0 .9rem;
    border-bottom: 1px solid var(--line); padding: .4rem 0; }
  table.stack td { display: block; border: 0; padding: .1rem .2rem; text-align: left; }
  table.stack td[data-label="queue"], table.stack td[data-label="job"],
  table.stack td[data-label="schedule"], table.stack td[data-label="payload"],
  table.stack td[data-label="error"], table.stack td[data-label="owner"] { flex-basis: 100%; }
  table.stack td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); }
  button, input[type=submit] { min-height: 2.4rem; }
}
/* The search box in every scope header, a job's page, its attempts. */
form.search { display: flex; gap: .3rem; margin: 0; flex: 0 1 22rem; min-width: 12rem; }
form.search input[type=search] { font: inherit; padding: .3rem .5rem; flex: 1 1 auto;
  min-width: 0; border: 1px solid var(--line); border-radius: 4px; background: var(--bg);
  color: var(--fg); }
.hidden { position: absolute; width: 1px; height: 1px; overflow: hidden;
  clip: rect(0 0 0 0); white-space: nowrap; }
header h1 a.scope { color: var(--muted); text-decoration: none; }
.badge.ok { color: var(--ok); border-color: var(--ok); }
dl.facts { display: grid; grid-template-columns: repeat(auto-fill, minmax(14rem, 1fr));
  gap: .3rem 1.2rem; margin: .5rem 0; }
dl.facts > div { min-width: 0; }
dl.facts dt { color: var(--muted); font-size: .8rem; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
#waiting ul { margin: .3rem 0; padding-left: 1.2rem; }
tr.note td { color: var(--muted); font-style: italic; }
pre.cargo { max-height: 30rem; }
.job h2 .id { font-size: 1rem; }
/* Concurrency limits: a queue's line under its name, the lanes' table. */
.limit { display: flex; flex-wrap: wrap; align-items: center; gap: .3rem .6rem;
  margin: .2rem 0 .4rem; }
form.limit { display: inline-flex; flex-wrap: wrap; align-items: center; gap: .3rem;
  margin: 0; }
form.limit input[type=text] { width: 12rem; }
input[type=number] { font: inherit; padding: .3rem .4rem; border: 1px solid var(--line);
  border-radius: 4px; background: var(--bg); color: var(--fg); width: 6.5rem;
  min-height: 2rem; }
@media (max-width: 40rem) {
  form.search { flex-basis: 100%; }
  dl.facts { grid-template-columns: 1fr 1fr; }
  table.stack td[data-label="reason"] { flex-basis: 100%; }
  table.stack tr.note td { flex-basis: 100%; }
  table.stack tr.note td::before { content: none; }
}
"""

JS = """\
// tickwork dashboard: confirm before destructive actions, an auto-refresh
// toggle, relative times. Everything works without it but the toggle.
(function () {
  "use strict";
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var question = form.getAttribute && form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  function relative(ms) {
    var seconds = Math.round((ms - Date.now()) / 1000);
    var past = seconds < 0;
    var left = Math.abs(seconds);
    var text;
    if (left < 45) { text = left + " s"; }
    else if (left < 2700) { text = Math.round(left / 60) + " min"; }
    else if (left < 129600) { text = Math.round(left / 3600) + " h"; }
    else { text = Math.round(left / 86400) + " d"; }
    return past ? text + " ago" : "in " + text;
  }
  function refreshTimes() {
    var times = document.querySelectorAll("time[data-ms]");
    for (var i = 0; i < times.length; i++) {
      var ms = Number(times[i].getAttribute("data-ms"));
      if (isFinite(ms)) {
        times[i].setAttribute("title", times[i].getAttribute("datetime"));
        times[i].textContent = relative(ms);
      }
    }
  }
  refreshTimes();
  window.setInterval(refreshTimes, 15000);

  var toggle = document.getElementById("autorefresh");
  if (toggle) {
    var key = "tickwork-dashboard-autorefresh";
    var timer = null;
    function arm() {
      if (timer) { window.clearTimeout(timer); timer = null; }
      if (toggle.checked) {
        // Reload without the flash message of the last action.
        timer = window.setTimeout(function () {
          window.location.replace(window.location.pathname);
        }, 10000);
      }
    }
    try { toggle.checked = window.localStorage.getItem(key) === "on"; } catch (e) {}
    toggle.addEventListener("change", function () {
      try { window.localStorage.setItem(key, toggle.checked ? "on" : "off"); } catch (e) {}
      arm();
    });
    arm();
  }
})();
"""

#: name -> (content type, body)
STATIC: dict[str, tuple[str, bytes]] = {
    "dashboard.css": ("text/css; charset=utf-8", CSS.encode()),
    "dashboard.js": ("text/javascript; charset=utf-8", JS.encode()),
}
