extension StatusPage {
    /// The page's markup; `/*STYLE*/` and `/*SCRIPT*/` are replaced by ``style`` and ``script``.
    static let markup = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>Concierge</title>
<link rel="icon" href="data:,">
<style>/*STYLE*/</style>
</head>
<body>
<header class="bar">
  <div class="brand"><span class="logo" aria-hidden="true">◆</span> Concierge</div>
  <div class="where"><span id="node" class="pill">daemon</span><span id="env" class="pill accent">–</span></div>
  <div class="live"><span id="dot" class="dot"></span><span id="conn">connecting…</span></div>
</header>

<main id="app" hidden>
  <section class="kpis">
    <article class="kpi"><h3>Requests / s</h3><p class="num" id="k-rps">–</p><svg class="spark" id="s-rps" viewBox="0 0 120 32" preserveAspectRatio="none"></svg></article>
    <article class="kpi"><h3>Hit ratio</h3><p class="num" id="k-hit">–</p><svg class="spark" id="s-hit" viewBox="0 0 120 32" preserveAspectRatio="none"></svg></article>
    <article class="kpi"><h3>Latency p50 · p99</h3><p class="num" id="k-lat">–</p><svg class="spark" id="s-lat" viewBox="0 0 120 32" preserveAspectRatio="none"></svg></article>
    <article class="kpi"><h3>Upstream errors / s</h3><p class="num" id="k-err">–</p><svg class="spark" id="s-err" viewBox="0 0 120 32" preserveAspectRatio="none"></svg></article>
    <article class="kpi"><h3>Cache</h3><p class="num" id="k-cache">–</p><p class="sub" id="k-bytes">–</p></article>
  </section>

  <section class="grid">
    <article class="card wide">
      <header><h2>Endpoints</h2><span class="hint">last 10 s</span></header>
      <table class="table" id="endpoints">
        <thead><tr><th>endpoint</th><th class="r">req/s</th><th class="r">hit ratio</th><th class="r">p50</th><th class="r">p99</th><th class="r">5xx/s</th><th class="r">total</th></tr></thead>
        <tbody></tbody>
      </table>
      <p class="empty" id="endpoints-empty">No requests yet.</p>
    </article>

    <article class="card">
      <header><h2>Session</h2><span id="session-state" class="badge">–</span></header>
      <dl class="facts" id="session"></dl>
      <div class="actions"><button id="logout" class="danger" type="button">Log the session out…</button></div>
    </article>

    <article class="card">
      <header><h2>Upstreams</h2><span class="hint" id="storage">storage –</span></header>
      <ul class="list" id="upstreams"></ul>
      <div class="actions row">
        <label for="env-select">Environment</label>
        <select id="env-select"></select>
        <button id="env-switch" type="button">Switch…</button>
      </div>
    </article>

    <article class="card">
      <header><h2>Fleet</h2><span id="fleet-state" class="badge">–</span></header>
      <dl class="facts" id="fleet"></dl>
      <ul class="list" id="nodes"></ul>
    </article>

    <article class="card">
      <header><h2>Invalidate</h2></header>
      <form id="invalidate" class="stack">
        <div class="row">
          <select id="inv-by" aria-label="Select entries by">
            <option value="pattern">pattern</option><option value="tags">tag</option>
            <option value="endpoint">endpoint</option><option value="all">everything</option>
          </select>
          <input id="inv-value" placeholder="regular expression over the cache keys" autocomplete="off">
        </div>
        <label class="check"><input type="checkbox" id="inv-soft"> soft: mark stale, revalidate on next use</label>
        <div class="actions"><button type="submit">Invalidate…</button></div>
      </form>
      <p class="result" id="inv-result"></p>
    </article>

    <article class="card full">
      <header><h2>Recent events</h2><span class="hint">invalidations, sessions, upstreams, warnings</span></header>
      <ol class="events" id="events"></ol>
      <p class="empty" id="events-empty">Nothing has happened yet.</p>
    </article>
  </section>
</main>

<section id="login" class="login" hidden>
  <form id="login-form" class="card">
    <h2>Admin token</h2>
    <p>The status page calls the admin API with the admin token (<code>admin.token_file</code>). It is kept in this tab only.</p>
    <input id="token" type="password" autocomplete="current-password" placeholder="admin token" required>
    <p class="result bad" id="login-error"></p>
    <div class="actions"><button type="submit">Open</button></div>
  </form>
</section>

<dialog id="confirm">
  <form method="dialog">
    <h2 id="confirm-title">Are you sure?</h2>
    <p id="confirm-text"></p>
    <div class="actions"><button value="cancel" type="submit" class="quiet">Cancel</button><button value="ok" id="confirm-ok" type="submit" class="danger">Confirm</button></div>
  </form>
</dialog>
<script>/*SCRIPT*/</script>
</body>
</html>
"""#
}
