extension StatusPage {
    /// The page's style: system fonts, light and dark themes following the system.
    static let style = #"""
:root {
  --bg: #f5f6f8; --panel: #ffffff; --ink: #1b1f24; --muted: #667085; --line: #e4e7ec;
  --accent: #2f6fed; --good: #12a150; --warn: #c98a04; --bad: #d92d20; --spark: #2f6fed; --fill: rgba(47,111,237,.12);
  --shadow: 0 1px 2px rgba(16,24,40,.06), 0 1px 3px rgba(16,24,40,.08); --on-accent: #ffffff;
}
@media (prefers-color-scheme: dark) {
  :root {
    --bg: #0f1217; --panel: #171b22; --ink: #e6e9ef; --muted: #98a2b3; --line: #262c36;
    --accent: #6b9bff; --good: #3ccf7e; --warn: #f2b84b; --bad: #ff6b5e; --spark: #6b9bff; --fill: rgba(107,155,255,.16);
    --shadow: none; --on-accent: #0b1220;
  }
}
* { box-sizing: border-box; }
html, body { margin: 0; background: var(--bg); color: var(--ink);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.bar { display: flex; align-items: center; gap: 16px; padding: 12px 24px; background: var(--panel);
  border-bottom: 1px solid var(--line); position: sticky; top: 0; z-index: 2; }
.brand { font-weight: 650; font-size: 16px; letter-spacing: .2px; }
.logo { color: var(--accent); }
.where { display: flex; gap: 8px; flex: 1; }
.pill { padding: 2px 10px; border-radius: 999px; background: var(--bg); border: 1px solid var(--line); color: var(--muted); font-size: 12px; }
.pill.accent { color: var(--accent); border-color: var(--accent); }
.live { display: flex; align-items: center; gap: 8px; color: var(--muted); font-size: 12px; }
.dot { width: 8px; height: 8px; border-radius: 50%; background: var(--warn); }
.dot.on { background: var(--good); box-shadow: 0 0 0 3px color-mix(in srgb, var(--good) 25%, transparent); }
.dot.off { background: var(--bad); }
main { padding: 20px 24px 40px; max-width: 1400px; margin: 0 auto; }
.kpis { display: grid; grid-template-columns: repeat(5, minmax(0, 1fr)); gap: 14px; margin-bottom: 16px; }
.kpi, .card { background: var(--panel); border: 1px solid var(--line); border-radius: 12px; box-shadow: var(--shadow); }
.kpi { padding: 14px 16px 10px; min-height: 118px; }
.kpi h3, .card h2 { margin: 0; font-size: 12px; font-weight: 600; color: var(--muted); text-transform: uppercase; letter-spacing: .6px; }
.num { margin: 6px 0 4px; font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; letter-spacing: -.3px; }
.sub { margin: 0; color: var(--muted); font-variant-numeric: tabular-nums; }
.spark { width: 100%; height: 32px; display: block; }
.spark polyline { fill: none; stroke: var(--spark); stroke-width: 1.5; vector-effect: non-scaling-stroke; }
.spark polygon { fill: var(--fill); stroke: none; }
.grid { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 14px; }
.card { padding: 14px 16px 16px; }
.card.wide { grid-column: span 2; }
.card.full { grid-column: 1 / -1; }
.card > header { display: flex; align-items: center; justify-content: space-between; margin-bottom: 10px; }
.hint { color: var(--muted); font-size: 12px; }
.badge { font-size: 12px; padding: 2px 10px; border-radius: 999px; border: 1px solid var(--line); color: var(--muted); }
.badge.good { color: var(--good); border-color: var(--good); }
.badge.warn { color: var(--warn); border-color: var(--warn); }
.badge.bad { color: var(--bad); border-color: var(--bad); }
.table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
.table th { text-align: left; font-weight: 500; color: var(--muted); font-size: 12px; padding: 6px 8px; border-bottom: 1px solid var(--line); }
.table td { padding: 7px 8px; border-bottom: 1px solid var(--line); }
.table tr:last-child td { border-bottom: 0; }
.table .r { text-align: right; }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 6px 14px; margin: 0 0 8px; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; font-variant-numeric: tabular-nums; overflow-wrap: anywhere; }
.list { list-style: none; margin: 0; padding: 0; }
.list li { display: flex; justify-content: space-between; align-items: center; gap: 10px; padding: 7px 0; border-bottom: 1px solid var(--line); }
.list li:last-child { border-bottom: 0; }
.list .url { color: var(--muted); font-size: 12px; overflow-wrap: anywhere; }
.events { list-style: none; margin: 0; padding: 0; max-height: 280px; overflow: auto; }
.events li { display: grid; grid-template-columns: 72px 170px 1fr; gap: 10px; padding: 6px 0; border-bottom: 1px solid var(--line); font-size: 13px; }
.events .t { color: var(--muted); font-variant-numeric: tabular-nums; }
.events .warn .k { color: var(--warn); }
.events .bad .k { color: var(--bad); }
.events .d { color: var(--muted); overflow-wrap: anywhere; }
.empty { color: var(--muted); margin: 8px 0 0; }
.actions { display: flex; gap: 8px; justify-content: flex-end; margin-top: 10px; }
.row { display: flex; gap: 8px; align-items: center; }
.row label { color: var(--muted); }
.stack { display: flex; flex-direction: column; gap: 10px; }
.check { color: var(--muted); display: flex; gap: 8px; align-items: center; }
input, select, button { font: inherit; color: var(--ink); background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 7px 10px; }
input:not([type=checkbox]) { flex: 1; min-width: 0; }
input:focus, select:focus, button:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
button { cursor: pointer; background: var(--accent); border-color: var(--accent); color: var(--on-accent); font-weight: 550; }
button.danger { background: var(--bad); border-color: var(--bad); }
button.quiet { background: transparent; color: var(--ink); border-color: var(--line); }
button:disabled { opacity: .5; cursor: default; }
.result { margin: 8px 0 0; min-height: 1.4em; color: var(--good); }
.result.bad { color: var(--bad); }
.login { display: grid; place-items: center; min-height: calc(100vh - 60px); padding: 20px; }
.login .card { width: min(420px, 100%); display: flex; flex-direction: column; gap: 10px; }
.login p { margin: 0; color: var(--muted); }
dialog { border: 1px solid var(--line); border-radius: 12px; background: var(--panel); color: var(--ink); padding: 18px 20px; width: min(440px, 92vw); box-shadow: 0 20px 50px rgba(0,0,0,.25); }
dialog::backdrop { background: rgba(10, 12, 16, .45); }
dialog h2 { margin: 0 0 8px; font-size: 16px; }
dialog p { margin: 0; color: var(--muted); overflow-wrap: anywhere; }
@media (max-width: 1100px) { .kpis { grid-template-columns: repeat(2, minmax(0, 1fr)); } .grid { grid-template-columns: 1fr; } .card.wide, .card.full { grid-column: auto; } }
"""#
}
