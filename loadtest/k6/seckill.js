// seckill.js — the flash-sale scenario of the Go load tool (go run ./loadtest), for k6.
//
// What it does:
//   setup()    starts a sale round: PUT /api/v1/products/{sku} (admin) with STOCK units,
//              max_per_order 1. A PUT on an existing SKU resets it (stock set, its orders deleted).
//   default    USERS iterations shared by VUS virtual users; each iteration is one distinct buyer
//              (k6-user-<n>, n = exec.scenario.iterationInTest) who orders once:
//              POST /api/v1/products/{sku}/orders {"user_id":...,"quantity":1[,"strategy":...]}
//              with Idempotency-Key <sku>-<user>. A 429 (busy) is retried with the same request
//              and key after Retry-After seconds (default 1), at most 5 times.
//              Every answer is counted by outcome (the error code of the contract,
//              internal/handler/openapi.yaml): seckill_orders_{ok,sold_out,already_purchased,busy,
//              other}, and 5xx answers in seckill_server_errors. With CANCEL, that share of the
//              buyers who got a unit cancel their order at once (POST /api/v1/orders/{id}/cancel
//              with their user_id): the unit is back on sale for the buyers still to come
//              (seckill_orders_cancelled).
//   teardown() reads GET /api/v1/products/{sku}/audit (admin), logs it, and throws — which makes
//              k6 exit non-zero — unless consistent is true and oversold is 0.
//
// Run it against a running service (go run ./cmd/api prints the admin token):
//
//   k6 run -e BASE_URL=http://localhost:8080 -e ADMIN_TOKEN=... loadtest/k6/seckill.js
//   k6 run -e ADMIN_TOKEN=... -e STOCK=50 -e USERS=5000 -e VUS=128 -e STRATEGY=pessimistic loadtest/k6/seckill.js
//
// Environment (-e NAME=value):
//   BASE_URL     service root                        default http://localhost:8080
//   ADMIN_TOKEN  SECKILL_ADMIN_TOKEN of the service  required (setup and teardown)
//   SKU          product of this round               default k6-<unix ms at setup>
//   STOCK        units on sale                       default 100
//   USERS        distinct buyers (= iterations)      default 1000
//   STRATEGY     per-request strategy                default none: the server's configured one
//   VUS          concurrent virtual users            default 64 (capped at USERS)
//   CANCEL       share of the winners who cancel     default 0 (0 to 1)
//
// Expect with USERS > STOCK: exactly STOCK seckill_orders_ok (STOCK + the cancelled ones, with
// CANCEL and buyers enough after them), the rest sold_out, no already_purchased (every buyer is
// distinct), no server errors; the audit's cancelled count is seckill_orders_cancelled.
//
// STRATEGY=naive (the server needs SECKILL_ALLOW_UNSAFE=true, else every order is a 400 and the
// checks fail) is EXPECTED to fail the teardown: it oversells on purpose, and the audit catching
// it is the point of running it.
//
// Syntax check without k6: cp loadtest/k6/seckill.js /tmp/x.mjs && node --check /tmp/x.mjs

import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';

const BASE_URL = (__ENV.BASE_URL || 'http://localhost:8080').replace(/\/+$/, '');
const ADMIN_TOKEN = __ENV.ADMIN_TOKEN || '';
const STOCK = intEnv('STOCK', 100, 0);
const USERS = intEnv('USERS', 1000, 1);
const VUS = intEnv('VUS', 64, 1);
const STRATEGY = (__ENV.STRATEGY || '').trim();
const CANCEL = Number(__ENV.CANCEL || '0');
if (!(CANCEL >= 0 && CANCEL <= 1)) {
  throw new Error(`CANCEL must be a share between 0 and 1, got ${JSON.stringify(__ENV.CANCEL)}`);
}
const MAX_BUSY_RETRIES = 5;
const SKU_RE = /^[A-Za-z0-9._-]{1,64}$/;

function intEnv(name, def, min) {
  const raw = __ENV[name];
  if (raw === undefined || raw === '') {
    return def;
  }
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min) {
    throw new Error(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  }
  return n;
}

// One counter per outcome; a 429 that is retried counts once per answer.
const outcomes = {
  ok: new Counter('seckill_orders_ok'),
  sold_out: new Counter('seckill_orders_sold_out'),
  already_purchased: new Counter('seckill_orders_already_purchased'),
  busy: new Counter('seckill_orders_busy'),
  other: new Counter('seckill_orders_other'),
};
const serverErrors = new Counter('seckill_server_errors');
const cancelled = new Counter('seckill_orders_cancelled');
const gaveUp = new Counter('seckill_buyers_gave_up_busy'); // still 429 after the last retry

// 409 (sold_out, already_purchased) and 429 (busy) are normal answers of a flash sale, so they do
// not count in http_req_failed nor leave the {expected_response:true} latency figures.
http.setResponseCallback(http.expectedStatuses(201, 409, 429));

export const options = {
  scenarios: {
    flash_sale: {
      executor: 'shared-iterations',
      // shared-iterations refuses more VUs than iterations.
      vus: Math.min(VUS, USERS),
      iterations: USERS,
    },
  },
  thresholds: {
    // http_req_failed means little here (409 is an expected answer); the checks are the verdict.
    checks: ['rate==1.0'],
    // No request may ever produce a 5xx. The counter gets a 0 per answer, so the threshold is
    // evaluated even when nothing failed.
    seckill_server_errors: ['count==0'],
    // A starting point, to tune per strategy and machine (etcd queues ~1.6 s at p50 by design).
    'http_req_duration{expected_response:true}': ['p(99)<500'],
  },
};

function adminParams() {
  return {
    headers: {
      Authorization: `Bearer ${ADMIN_TOKEN}`,
      'Content-Type': 'application/json',
    },
    // The admin calls answer 200, which the global callback above would call a failure.
    responseCallback: http.expectedStatuses(200),
  };
}

function errorCode(res) {
  try {
    const body = JSON.parse(res.body);
    return body && body.error && typeof body.error.code === 'string' ? body.error.code : '';
  } catch (_) {
    return '';
  }
}

function outcomeOf(res) {
  if (res.status === 201) {
    return 'ok';
  }
  const code = errorCode(res);
  if (res.status === 409 && (code === 'sold_out' || code === 'already_purchased')) {
    return code;
  }
  if (res.status === 429 && code === 'busy') {
    return 'busy';
  }
  return 'other';
}

function retryAfterSeconds(res) {
  const s = Number.parseInt(res.headers['Retry-After'] || '', 10);
  return Number.isFinite(s) && s >= 0 ? s : 1;
}

function orderID(res) {
  try {
    const id = JSON.parse(res.body).order_id;
    return typeof id === 'string' ? id : '';
  } catch (_) {
    return '';
  }
}

export function setup() {
  if (!ADMIN_TOKEN) {
    throw new Error('ADMIN_TOKEN is required (the SECKILL_ADMIN_TOKEN the service printed at start): k6 run -e ADMIN_TOKEN=... loadtest/k6/seckill.js');
  }
  const sku = __ENV.SKU || `k6-${Date.now()}`;
  if (!SKU_RE.test(sku)) {
    throw new Error(`SKU ${JSON.stringify(sku)} does not match [A-Za-z0-9._-]{1,64}`);
  }
  const res = http.put(
    `${BASE_URL}/api/v1/products/${sku}`,
    JSON.stringify({ name: 'k6 sale', stock: STOCK, max_per_order: 1 }),
    adminParams(),
  );
  const ok = check(res, { 'setup: product PUT is 200': (r) => r.status === 200 });
  if (!ok) {
    throw new Error(`setup: PUT /api/v1/products/${sku} answered ${res.status}: ${res.body}`);
  }
  console.log(`sale round: sku=${sku} stock=${STOCK} users=${USERS} vus=${Math.min(VUS, USERS)} strategy=${STRATEGY || '(server default)'} base=${BASE_URL}`);
  return { sku };
}

export default function (data) {
  const sku = data.sku;
  const user = `k6-user-${exec.scenario.iterationInTest}`;
  const order = { user_id: user, quantity: 1 };
  if (STRATEGY) {
    order.strategy = STRATEGY;
  }
  const url = `${BASE_URL}/api/v1/products/${sku}/orders`;
  const body = JSON.stringify(order);
  const params = {
    headers: {
      'Content-Type': 'application/json',
      'Idempotency-Key': `${sku}-${user}`,
    },
    tags: { name: 'POST /api/v1/products/{sku}/orders' },
  };

  for (let attempt = 0; ; attempt++) {
    const res = http.post(url, body, params);
    const outcome = outcomeOf(res);
    outcomes[outcome].add(1);
    serverErrors.add(res.status >= 500 ? 1 : 0);

    check(res, {
      'status is 201, 409 or 429': (r) => r.status === 201 || r.status === 409 || r.status === 429,
      'no 5xx': (r) => r.status < 500,
    }, { outcome });
    if (res.status === 201) {
      check(res, { '201 body has order_id': (r) => orderID(r) !== '' }, { outcome });
      if (Math.random() < CANCEL) {
        const cancel = http.post(`${BASE_URL}/api/v1/orders/${orderID(res)}/cancel`, JSON.stringify({ user_id: user }), {
          headers: { 'Content-Type': 'application/json' },
          tags: { name: 'POST /api/v1/orders/{order_id}/cancel' },
          responseCallback: http.expectedStatuses(200),
        });
        check(cancel, { 'cancel is 200': (r) => r.status === 200 });
        cancelled.add(cancel.status === 200 ? 1 : 0);
      }
    }

    if (res.status !== 429) {
      return;
    }
    if (attempt >= MAX_BUSY_RETRIES) {
      gaveUp.add(1);
      return;
    }
    sleep(retryAfterSeconds(res)); // same body, same Idempotency-Key
  }
}

export function teardown(data) {
  const res = http.get(`${BASE_URL}/api/v1/products/${data.sku}/audit`, adminParams());
  console.log(`audit ${data.sku}: ${res.status} ${res.body}`);
  if (res.status !== 200) {
    throw new Error(`teardown: GET /api/v1/products/${data.sku}/audit answered ${res.status}: ${res.body}`);
  }
  let audit;
  try {
    audit = JSON.parse(res.body);
  } catch (e) {
    throw new Error(`teardown: audit is not JSON: ${res.body}`);
  }
  // The per-VU ok counters cannot be read here, so the audit (the database, the source of
  // truth) is the verdict on overselling.
  if (audit.consistent !== true || !(audit.oversold === 0)) {
    throw new Error(`teardown: sale ${data.sku} is NOT consistent (consistent=${audit.consistent}, oversold=${audit.oversold}): ${res.body}`);
  }
}
