// Fleet overview: the shown page's tiles and pool summaries over server-sent events (every 2 s, only what
// changed). The server formats every text and picks every colour; this only swaps text and classes, so the
// sparklines and the scroll position stay as they are.
(function () {
  "use strict";
  const main = document.querySelector("main[data-fleet-live]");
  if (!main || !window.EventSource) return;
  const flag = document.getElementById("fleet-live");
  const live = flag.textContent;
  let events = 0;

  function setText(node, text) {
    if (node && node.textContent !== text) node.textContent = text;
  }

  function updateTile(tile, data) {
    const alert = data.alert ? " alerted alert-" + data.alert : "";
    const wanted = "tile " + data.heat + alert;
    if (tile.className !== wanted) tile.className = wanted;
    const status = tile.querySelector('[data-field="status"]');
    setText(status, data.status);
    status.className = "badge " + data.status;
    const mark = tile.querySelector('[data-field="mark"]');
    setText(mark, data.mark);
    mark.className = "alert-mark" + (data.alert ? " " + data.alert : "");
    mark.hidden = !data.alert;
    setText(tile.querySelector('[data-field="gpus"]'), data.gpus);
    setText(tile.querySelector('[data-field="hot"]'), data.hot ? " · hottest: " + data.hot : "");
    tile.querySelectorAll("[data-metric]").forEach(function (cell) {
      setText(cell, data.values[cell.dataset.metric] || "—");
    });
    tile.querySelectorAll("[data-why]").forEach(function (why) {
      const text = data.why[why.dataset.why] || "";
      setText(why, text);
      why.title = text;
      why.hidden = !text;
    });
  }

  function updatePool(section, data) {
    section.querySelectorAll("[data-pool-field]").forEach(function (field) {
      const name = field.dataset.poolField;
      if (name === "p99_heat") field.className = "p99 " + data.p99_heat;
      else setText(field, data[name]);
    });
  }

  const source = new EventSource(main.dataset.fleetLive);
  source.onmessage = function (message) {
    const data = JSON.parse(message.data);
    // a tile per node and section: "node/pool" in a pool's section (its values that pool's), "node" alone else
    document.querySelectorAll("li.tile").forEach(function (tile) {
      const changed = data.tiles[tile.dataset.tile];
      if (changed) updateTile(tile, changed);
    });
    Object.keys(data.pools).forEach(function (pool) {
      document.querySelectorAll("section.pool-group").forEach(function (section) {
        if (section.dataset.pool === pool) updatePool(section, data.pools[pool]);
      });
    });
    Object.keys(data.counts).forEach(function (name) {
      const count = document.querySelector('[data-count="' + name + '"]');
      if (count) setText(count.querySelector("b") || count, String(data.counts[name]));
    });
    events += 1;
    flag.dataset.events = String(events);
    flag.dataset.ts = String(data.ts);
    flag.textContent = live;
  };
  source.onerror = function () {
    // a refusal (429: too many live pages open) closes the source for good; a dropped connection retries
    flag.textContent =
      source.readyState === EventSource.CLOSED
        ? "live updates stopped: close other live pages, then reload"
        : "live updates paused: reconnecting";
  };
})();
