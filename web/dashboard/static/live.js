// Node detail: the latest values over server-sent events (every 500 ms). The server formats each value with its
// unit; this only swaps text, so nothing blinks and nothing is computed here.
(function () {
  "use strict";
  const main = document.querySelector("main[data-live-url]");
  if (!main || !window.EventSource) return;
  const flag = document.getElementById("live-flag");
  const source = new EventSource(main.dataset.liveUrl);
  const live = flag.textContent;  // "live every 500 ms", or a scraped node's interval, as the page rendered it
  let events = 0;
  source.onmessage = function (message) {
    const data = JSON.parse(message.data);
    document.querySelectorAll("[data-series][data-metric]").forEach(function (cell) {
      const series = data.values[cell.dataset.series] || {};
      const text = series[cell.dataset.metric] || "—";
      if (cell.textContent !== text) cell.textContent = text;
    });
    const status = document.getElementById("live-status");
    status.textContent = data.status;
    status.className = "badge " + data.status;
    document.getElementById("live-age").textContent = data.last_seen;
    events += 1;
    flag.dataset.events = String(events);
    flag.dataset.ts = data.ts === null ? "" : String(data.ts);
    flag.textContent = live;
  };
  source.onerror = function () {
    flag.textContent = "live updates paused: reconnecting";
  };
})();
