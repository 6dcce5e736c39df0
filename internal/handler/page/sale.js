"use strict";
// The sale page's script: the countdown, the live figures, the waiting room and the order.
(() => {
  const page = document.getElementById("sale");
  const sku = page.dataset.sku;
  const api = "/api/v1/products/" + encodeURIComponent(sku);
  const room = page.dataset.room === "true";
  const startsAt = page.dataset.startsAt ? Date.parse(page.dataset.startsAt) : 0;
  const el = (id) => document.getElementById(id);
  const act = el("act"), message = el("message"), position = el("position");

  // The server's clock, not the browser's: a browser's clock is often minutes off, and the
  // button must not open before the sale does. The offset is taken from the time the server
  // wrote into the page; the page arrives a little after it was written, so the countdown ends
  // that little late, never early.
  const offset = Number(page.dataset.serverNow) - Date.now();
  const now = () => Date.now() + offset;

  let state = page.dataset.state;
  let pass = "";
  let busy = false;      // a request of this buyer is out
  let ordered = false;   // the buyer holds an order: the flow is over

  const say = (text) => { message.textContent = text; };
  const words = {
    upcoming: "Not on sale yet", open: "On sale", sold_out: "Sold out", ended: "The sale has ended",
  };

  const started = () => !startsAt || now() >= startsAt;
  const refresh = () => {
    const closed = state === "sold_out" || state === "ended";
    act.disabled = busy || ordered || closed || !started();
    act.textContent = room && !pass ? "Join the line" : "Buy";
  };

  // The countdown, to starts_at by the server's clock.
  const countdown = el("countdown");
  const tick = () => {
    const left = startsAt - now();
    if (left <= 0) {
      countdown.hidden = true;
      clearInterval(timer);
      refresh();
      return;
    }
    const s = Math.ceil(left / 1000);
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60);
    countdown.hidden = false;
    countdown.textContent = "Starts in " + (h ? h + " h " : "") + (h || m ? m + " min " : "") + (s % 60) + " s";
  };
  const timer = startsAt ? setInterval(tick, 100) : 0;
  if (startsAt) tick();

  // Live figures: one event stream per page; the browser reconnects it by itself.
  const events = new EventSource(api + "/events");
  events.addEventListener("stock", (e) => {
    const f = JSON.parse(e.data);
    el("stock").textContent = f.stock;
    el("sold").textContent = f.sold;
    state = f.state;
    const s = el("state");
    s.textContent = words[f.state] || f.state;
    s.className = "state state-" + f.state;
    page.dataset.state = f.state;
    if (f.state === "sold_out" && !ordered) {
      position.hidden = true;
      say("Sold out: every unit has gone.");
    }
    refresh();
  });

  // Who buys: a name where buyers are not authenticated, else the buyer's token.
  const who = () => {
    if (page.dataset.identity === "token") {
      const token = el("token").value.trim();
      return token ? { headers: { Authorization: "Bearer " + token }, body: {}, query: "" } : null;
    }
    // Without identity a GET names its buyer in the query: it has no body.
    const name = el("buyer").value.trim();
    return name ? { headers: {}, body: { user_id: name }, query: "?user_id=" + encodeURIComponent(name) } : null;
  };

  const call = async (method, url, body, headers) => {
    const init = { method, headers: Object.assign({}, headers) };
    if (body) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const res = await fetch(url, init);
    const json = await res.json().catch(() => ({}));
    return { res, json };
  };

  // refusal says an error answer in words.
  const refusal = (res, json) => {
    const code = json.error ? json.error.code : "";
    const retry = res.headers.get("Retry-After");
    switch (code) {
      case "sold_out": return "Sold out: the last unit went before your turn.";
      case "already_purchased": return "You already hold an order for this product.";
      case "busy": case "rate_limited": case "unavailable":
        return "Busy: too many buyers at once. Try again in " + (retry || "a few") + " s.";
      case "sale_not_started": return "Not on sale yet.";
      case "sale_ended": return "The sale has ended.";
      case "pass_required": case "pass_invalid":
        pass = "";
        return "Your pass is not valid any more: join the line again.";
      case "unauthenticated": return "Your token was refused: sign in again.";
      case "invalid_argument": return "Check your name: " + json.error.message;
      default: return "Something went wrong (" + res.status + "). Try again.";
    }
  };

  const showOrder = (o) => {
    el("order").hidden = false;
    el("order-id").textContent = o.order_id;
    const status = el("order-status");
    status.textContent = o.status + (o.reason ? " (" + o.reason + ")" : "");
    status.dataset.status = o.status;
  };

  // follow reads a queued order until it is placed or rejected (?wait= holds each answer).
  const follow = async (id, buyer) => {
    for (;;) {
      const { res, json } = await call("GET", "/api/v1/orders/" + id + "?wait=5s", null, buyer.headers);
      if (!res.ok) return say(refusal(res, json));
      showOrder(json);
      if (json.status !== "queued") {
        return say(json.status === "rejected" ? "Your order was not placed: " + (json.reason || "refused") + "." : "Your order is placed.");
      }
    }
  };

  const buy = async (buyer) => {
    const headers = Object.assign({}, buyer.headers);
    if (pass) headers["Seckill-Pass"] = pass;
    say("Placing your order…");
    const { res, json } = await call("POST", api + "/orders", Object.assign({ quantity: 1 }, buyer.body), headers);
    if (res.status === 201 || res.status === 202) {
      ordered = true;
      showOrder(json);
      if (res.status === 202) {
        say("Your order is queued…");
        return follow(json.order_id, buyer);
      }
      return say("Your order is placed.");
    }
    say(refusal(res, json));
  };

  // poll follows a waiting-room ticket until the buyer is admitted.
  const poll = async (ticket, buyer, after) => {
    for (;;) {
      await new Promise((r) => setTimeout(r, Math.max(200, after)));
      const { res, json } = await call("GET", api + "/queue/" + encodeURIComponent(ticket) + buyer.query, null, buyer.headers);
      if (!res.ok) {
        position.hidden = true;
        return say(refusal(res, json));
      }
      if (json.admitted) {
        pass = json.pass;
        position.hidden = true;
        return say("You're in: buy before " + new Date(json.pass_expires_at).toLocaleTimeString() + ".");
      }
      showPosition(json);
      after = json.poll_after_ms || 1000;
    }
  };

  const showPosition = (q) => {
    position.hidden = false;
    position.dataset.position = q.position === null ? "" : q.position;
    position.textContent = q.position === null
      ? "You're in the line; places are drawn at the start."
      : q.position + " ahead of you · about " + q.eta_s + " s";
  };

  const join = async (buyer) => {
    say("Joining the line…");
    const { res, json } = await call("POST", api + "/queue", buyer.body, buyer.headers);
    if (res.status !== 202) return say(refusal(res, json));
    say("You're in the line.");
    showPosition(json);
    return poll(json.ticket, buyer, json.poll_after_ms || 1000);
  };

  act.addEventListener("click", async () => {
    const buyer = who();
    if (!buyer) return say(page.dataset.identity === "token" ? "Paste your buyer token first." : "Type your name first.");
    busy = true;
    refresh();
    try {
      await (room && !pass ? join(buyer) : buy(buyer));
    } catch (e) {
      say("The server did not answer. Try again.");
    } finally {
      busy = false;
      refresh();
    }
  });
  refresh();
})();
