// host.mjs is the smallest JavaScript program that joins a meshctl mesh as a module instance,
// the counterpart of examples/host in Go: it reads the membership `meshctl credentials issue`
// printed, joins the bus, prints and acknowledges every event the module follows (with
// --follow, or without --seat) and, with --seat, takes the seat's work as its holder, keeping
// work that lasts --work in progress at the worker's own ack wait. SIGINT or SIGTERM stops
// taking deliveries, lets the work in hand finish and leaves. With --publish it publishes one message as the module
// instead (an event it emits, work it sends) and exits.
//
//   meshctl credentials issue beta.postman -f examples/quickstart > /tmp/m.json
//   node examples/host-js/host.mjs --membership /tmp/m.json --follow --seat mailer --emit sent
//
// Every client library must be told three things to work under the grants meshctl derives (see
// docs/hosts/javascript.md): the inbox prefix `_INBOX.<user>`, to bind the existing consumer
// and never create one or look up its stream, and (push consumers only) the deliver group of a
// seat's worker. It joins with a password, an nkey seed, or a seed and its user JWT (operator
// mode, its membership file read again at every reconnect), through any of a cluster's servers,
// recognising the bus by its pinned fingerprints or by the CA that signs its certificates, and
// presents a client certificate where the membership names one.

import { createHash, X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { connect as dial, isIP } from "node:net";
import { checkServerIdentity, connect as tlsConnect } from "node:tls";
import { parseArgs } from "node:util";

import { connect, errors, jwtAuthenticator, nkeyAuthenticator, nkeys } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

// opTimeout bounds each acknowledgement and publish, in milliseconds: a bus that does not answer
// in this long is reported, and the message comes back after its ack wait.
const opTimeout = 5000;

const log = (line) => process.stderr.write(`host: ${line}\n`);
const print = (line) => process.stdout.write(`${line}\n`);

// Names of the mesh's streams, consumers and subjects, as meshctl's render package spells them.
const streamEvents = "EVENTS";
const upperSnake = (s) => s.toUpperCase().replaceAll("-", "_");
const seatStream = (seat) => `SEAT_${upperSnake(seat)}`;
const workerConsumer = (seat) => `${seatStream(seat)}_worker`;
const instanceConsumer = (node, module) => `${node}_${module}`;
const seatEvent = (seat, event) => `mesh.seat.${seat}.event.${event}`;

// instanceOf reads a module instance's user, `<node>.<module>`; nodes' and enrolment users are
// not module instances.
function instanceOf(user) {
  const dot = user.indexOf(".");
  if (dot <= 0 || dot === user.length - 1) return null;
  const node = user.slice(0, dot);
  const module = user.slice(dot + 1);
  if (module.includes(".") || node === "node" || node === "enrol") return null;
  return { node, module };
}

const membershipFields = ["address", "fingerprint", "ca", "cert_file", "key_file", "user", "password", "seed", "jwt", "servers"];
const maxMembership = 64 << 10;

// userKeyOf is the public key of seed when it is an nkey user seed (SU…), else null: an
// account's seed, or one cut short in a copy, would otherwise be found out only as a refused
// login.
function userKeyOf(seed) {
  try {
    const kp = nkeys.fromSeed(new TextEncoder().encode(seed));
    const pub = kp.getPublicKey();
    kp.clear();
    return pub.startsWith("U") ? pub : null;
  } catch {
    return null;
  }
}

// userJWTSubject is the subject (the user's public key) of a user JWT, or null for a token
// that is not one. The servers check its signature; this only keeps halves of two credentials
// from being put together.
function userJWTSubject(token) {
  try {
    const claims = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString("utf8"));
    return claims?.nats?.type === "user" && typeof claims.sub === "string" ? claims.sub : null;
  } catch {
    return null;
  }
}

// readMembership reads the one JSON line `meshctl credentials issue` prints, from the file at
// path or from stdin.
async function readMembership(path) {
  return parseMembership(path && path !== "-" ? await readFile(path, "utf8") : await readStdin());
}

// parseMembership reads a membership. Unknown fields are an error, as in the Go host: a
// misspelt "pasword" must say so. It carries exactly one secret, a password or an nkey user
// seed (bus.auth: nkey), with the user JWT of the seed's key in operator mode (bus.auth: jwt),
// and for a cluster `servers`, every server's URL. Errors never quote the input, which holds
// the secret.
function parseMembership(text) {
  // A membership is one short line: a host pointed at the wrong file says so.
  if (text.length > maxMembership) {
    throw new Error(`reading the membership: over ${maxMembership} bytes, so not a membership`);
  }
  let m;
  try {
    m = JSON.parse(text);
  } catch {
    throw new Error("reading the membership: not JSON (meshctl credentials issue PRINCIPAL prints one)");
  }
  if (m === null || typeof m !== "object" || Array.isArray(m)) {
    throw new Error("reading the membership: not a JSON object");
  }
  const unknown = Object.keys(m).filter((k) => !membershipFields.includes(k));
  if (unknown.length > 0) {
    throw new Error(`reading the membership: unknown field(s) ${unknown.map((k) => JSON.stringify(k)).join(", ")}`);
  }
  for (const k of ["fingerprint", "ca", "cert_file", "key_file", "password", "seed", "jwt"]) {
    if (m[k] !== undefined && typeof m[k] !== "string") {
      throw new Error(`reading the membership: the ${k} is not a string`);
    }
  }
  if (!m.cert_file !== !m.key_file) {
    throw new Error("reading the membership: a client certificate needs both cert_file and key_file");
  }
  if (m.ca) {
    try {
      new X509Certificate(m.ca);
    } catch {
      throw new Error("reading the membership: its ca holds no PEM certificate");
    }
  }
  const missing = ["address", "user"].filter((k) => typeof m[k] !== "string" || m[k].trim() === "");
  const password = (m.password ?? "").trim() !== "";
  const seed = (m.seed ?? "").trim() !== "";
  if (m.jwt && !seed) {
    // Half a credential: the servers ask the seed to sign their challenge.
    throw new Error("reading the membership: a user JWT without its seed; an operator-mode membership carries both, as meshctl credentials issue prints it");
  }
  if (!password && !seed) missing.push("password or seed");
  if (missing.length > 0) {
    throw new Error(`reading the membership: no ${missing.join(", no ")}`);
  }
  if (password && seed) {
    throw new Error("reading the membership: both a password and a seed; a membership carries one, as meshctl credentials issue prints it");
  }
  const userKey = seed ? userKeyOf(m.seed) : null;
  if (seed && !userKey) {
    throw new Error("reading the membership: the seed is not an nkey user seed (SU…)");
  }
  if (m.jwt) {
    const subject = userJWTSubject(m.jwt);
    if (!subject) {
      throw new Error("reading the membership: its jwt is not a user JWT (what meshctl credentials issue prints in operator mode)");
    }
    if (subject !== userKey) {
      throw new Error(`reading the membership: the seed's public key ${userKey} is not the user JWT's subject ${subject}: the two are halves of different credentials`);
    }
  }
  const servers = m.servers ?? [];
  if (!Array.isArray(servers) || servers.some((s) => typeof s !== "string" || s.trim() === "")) {
    throw new Error("reading the membership: the servers are not a list of server URLs");
  }
  return {
    address: m.address.trim(), fingerprint: m.fingerprint ?? "", ca: m.ca ?? "",
    certFile: m.cert_file ?? "", keyFile: m.key_file ?? "", user: m.user,
    password: password ? m.password : "", seed: seed ? m.seed : "", jwt: m.jwt ?? "",
    servers: servers.map((s) => s.trim()),
  };
}

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString("utf8");
}

// parseAddress splits nats://host:port or tls://host:port (no scheme means nats://).
function parseAddress(address) {
  const withScheme = address.includes("://") ? address : `nats://${address}`;
  const u = new URL(withScheme);
  if (u.username || u.password) {
    throw new Error(`bus address ${u.protocol}//${u.host} carries a user or password: give them in the membership's fields instead`);
  }
  if (u.protocol !== "nats:" && u.protocol !== "tls:") {
    throw new Error(`bus address ${u.protocol}//${u.host}: the scheme must be nats:// or tls://`);
  }
  return { tls: u.protocol === "tls:", hostname: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port || 4222), server: u.host };
}

// normalFingerprints accepts what operators paste: upper or lower case, with or without ':'.
// A cluster whose servers present different certificates lists each, separated by spaces, and
// any of them is the bus.
function normalFingerprints(s) {
  return s.trim().split(/\s+/).map((p) => {
    const f = p.replaceAll(":", "").toLowerCase();
    if (!/^[0-9a-f]{64}$/.test(f)) throw new Error("the membership's fingerprint is not a hex SHA-256 (64 hex digits, ':' allowed)");
    return f;
  });
}

// serverName is the name sent in the TLS handshake: none for an IP address, which TLS does not
// allow there (the certificate is pinned, so no name is checked either way).
const serverName = (addr) => (isIP(addr.hostname) ? "" : addr.hostname);

const sha256 = (der) => createHash("sha256").update(der).digest("hex");

// serverCert fetches the certificate the server at addr presents: a NATS server sends INFO in
// the clear, then upgrades the connection to TLS.
function serverCert(addr) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => { sock.destroy(); reject(new Error(`no TLS handshake from ${addr.server} within ${opTimeout} ms`)); }, opTimeout);
    const sock = dial({ host: addr.hostname, port: addr.port });
    sock.once("error", (err) => { clearTimeout(timer); reject(err); });
    let seen = "";
    sock.on("data", (chunk) => {
      seen += chunk.toString("latin1");
      if (!seen.includes("\r\n")) return;
      sock.removeAllListeners("data");
      sock.pause();
      const t = tlsConnect({ socket: sock, rejectUnauthorized: false, servername: serverName(addr) });
      t.once("error", (err) => { clearTimeout(timer); reject(err); });
      t.once("secureConnect", () => {
        clearTimeout(timer);
        const cert = t.getPeerCertificate();
        t.destroy();
        resolve(cert.raw);
      });
    });
  });
}

// pinnedTLS is the TLS options that accept exactly the certificates whose SHA-256 is among pins,
// for the servers addrs, and refresh, which looks at the servers' certificates again. The mesh's
// bus presents a certificate no public verifier accepts, so the pin is how a client knows it
// reached the right server. Node verifies a chain before it asks checkServerIdentity, so each
// server's certificate is fetched, checked against the pins, and trusted as its own root;
// checkServerIdentity then checks the pin again on the connection that carries the secret, so a
// server swapped in between is refused too. A server that does not answer now is left out of
// the fetch, not refused: the bus is whichever of its servers answers.
//
// The library reads the trusted list at every connection, so refresh, called when the
// connection is lost and before each attempt to make it again, adds a pinned certificate the
// servers present since: a planned rotation (the new certificate pinned beside the old) is
// taken by the next reconnect, the membership unchanged.
async function pinnedTLS(addrs, pins) {
  const trusted = [];
  let said = "";
  const fetchPinned = async () => {
    let refusal;
    const presented = [];
    for (const addr of addrs) {
      let der;
      try {
        der = await serverCert(addr);
      } catch (err) {
        refusal ??= err;
        continue;
      }
      if (!pins.includes(sha256(der))) {
        refusal = new Error(`the bus at ${addr.server} presented a certificate whose SHA-256 is ${sha256(der)}, not the pinned ${pins.join(" or ")}`);
        continue;
      }
      const pem = `-----BEGIN CERTIFICATE-----\n${der.toString("base64").match(/.{1,64}/g).join("\n")}\n-----END CERTIFICATE-----\n`;
      if (!presented.includes(pem)) presented.push(pem);
    }
    // What the servers present now goes first: OpenSSL takes the first trusted certificate
    // whose subject names the leaf's issuer, and a certificate and its successor usually share
    // their subject. The rest stay, for the servers that did not answer.
    trusted.splice(0, trusted.length, ...presented, ...trusted.filter((p) => !presented.includes(p)));
    return refusal;
  };
  const refusal = await fetchPinned();
  if (trusted.length === 0) throw refusal;
  const options = {
    ca: trusted,
    checkServerIdentity: (host, cert) =>
      pins.includes(sha256(cert.raw)) ? undefined : new Error(`the bus at ${host} presented a certificate other than the pinned one`),
  };
  // The name sent in the handshake is one server's: with several, each is left the library's.
  if (addrs.length === 1) options.servername = serverName(addrs[0]);
  let fetching = null;
  const refresh = () => {
    fetching ??= fetchPinned().then((err) => {
      // Said once, not at every attempt of a reconnect that keeps failing.
      if (err && err.message !== said) log(err.message);
      said = err?.message ?? "";
    }).finally(() => { fetching = null; });
  };
  return { options, refresh };
}

// caTLS is the TLS options that verify the bus by the CA that signs its certificates (the
// membership's ca): the chain, and the server's name, as Node verifies any server. A
// certificate the CA renews is accepted with the membership unchanged. With pins as well, the
// certificate must also be one of them.
function caTLS(ca, pins) {
  return {
    ca: [ca],
    checkServerIdentity: (host, cert) => {
      const wrongName = checkServerIdentity(host, cert);
      if (wrongName) return wrongName;
      if (pins.length > 0 && !pins.includes(sha256(cert.raw))) {
        return new Error(`the bus at ${host} presented a certificate whose SHA-256 is ${sha256(cert.raw)}, not the pinned ${pins.join(" or ")}`);
      }
      return undefined;
    },
  };
}

// operatorLogin is the authenticator of an operator-mode membership: the user JWT, and the
// seed's signature of the server's nonce. The servers read a user's permissions only when it
// connects, so a new credential for changed permissions is taken by reconnecting: a membership
// file (path) is read again at every connection, and the credential the node's agent, or an
// operator, wrote over it since is the one presented. A file that does not read as this
// principal's membership is said, and the credential read before is presented.
function operatorLogin(m, path) {
  let current = m;
  const reread = () => {
    if (!path || path === "-") return current;
    try {
      const now = parseMembership(readFileSync(path, "utf8"));
      if (now.user !== m.user) throw new Error(`it now holds ${now.user}'s membership, not ${m.user}'s`);
      if (!now.jwt) throw new Error("it now holds no user JWT: the bus's auth changed, so restart the host");
      current = now;
    } catch (err) {
      log(`reading ${path} again: ${err.message}; presenting the credential read before`);
    }
    return current;
  };
  return (nonce) => {
    const c = reread();
    return jwtAuthenticator(c.jwt, new TextEncoder().encode(c.seed))(nonce);
  };
}

// join connects as the membership's principal, through whichever of the bus's servers answers:
// the address, and for a cluster every other server the membership lists. It says which server
// it joined, and returns what to call when the connection is lost (a pinned bus's certificates
// are looked at again). path is the membership's file, read again at every connection in
// operator mode.
async function join(m, path) {
  const addrs = [];
  for (const a of [m.address, ...m.servers].map(parseAddress)) {
    if (!addrs.some((b) => b.server === a.server)) addrs.push(a);
  }
  const options = {
    servers: addrs.map((a) => a.server),
    // One of the three: every reply, JetStream's included, must land under the only inbox the
    // user is granted. The default prefix is random and refused.
    inboxPrefix: `_INBOX.${m.user}`,
    // A host outlives a restart of the bus, and the loss of a cluster's server: it reconnects
    // for ever, to any server.
    maxReconnectAttempts: -1,
    name: m.user,
  };
  if (m.jwt) {
    options.authenticator = operatorLogin(m, path);
    // Until the file holds a credential the servers take, a reconnect refused is tried again,
    // not given up after two refusals: the new credential may not be written yet.
    options.ignoreAuthErrorAbort = true;
  } else if (m.seed) {
    // An nkey principal: the server knows its public key, and the client signs the server's
    // challenge with the seed. The seed itself never leaves the process.
    options.authenticator = nkeyAuthenticator(new TextEncoder().encode(m.seed));
  } else {
    options.user = m.user;
    options.pass = m.password;
  }
  const pins = m.fingerprint ? normalFingerprints(m.fingerprint) : [];
  let lost = () => {};
  if (m.ca) {
    options.tls = caTLS(m.ca, pins);
  } else if (pins.length > 0) {
    const pinned = await pinnedTLS(addrs, pins);
    options.tls = pinned.options;
    lost = pinned.refresh;
  } else if (m.certFile || addrs.some((a) => a.tls)) {
    // tls:// without a pin or a CA: the server's certificate must pass the system's verifier.
    options.tls = {};
  }
  if (m.certFile) {
    // Read by the library at every connection, so a certificate renewed in place is presented
    // at the next reconnect.
    options.tls.certFile = m.certFile;
    options.tls.keyFile = m.keyFile;
  }
  const nc = await connect(options);
  return { nc, server: `${options.tls ? "tls" : "nats"}://${nc.getServer()}`, lost };
}

// refusal finds the server's permission refusal in err's causes, if the refusal is what failed.
function refusal(err) {
  for (let e = err; e; e = e.cause) {
    if (e instanceof errors.PermissionViolationError) return e;
  }
  return null;
}

// describe says what failed, naming the refused subject when the bus refused one: most refusals
// reach a client as a timeout, and "timeout" sends an operator looking in the wrong place.
function describe(err, user) {
  const pe = refusal(err);
  if (pe) {
    const verb = pe.operation === "publish" ? "publish to" : "subscribe to";
    return `user ${JSON.stringify(user)} may not ${verb} ${JSON.stringify(pe.subject)}${pe.queue ? ` in queue group ${JSON.stringify(pe.queue)}` : ""}`;
  }
  return err?.message ?? String(err);
}

// redeliveryOf reads what a consumer's info says of redelivery: how long the server waits for
// an acknowledgement (ack_wait, in nanoseconds; with a backoff, its interval for the delivery)
// and how many times it delivers a message at most (max_deliver; -1: no limit). The
// description may set each, so a host reads them rather than assume the server's 30 s.
function redeliveryOf(config) {
  return {
    ackWaitMs: (config.ack_wait || 30e9) / 1e6,
    backoffMs: (config.backoff ?? []).map((n) => n / 1e6),
    maxDeliver: config.max_deliver > 0 ? config.max_deliver : 0,
  };
}

// waitMs is how long the server waits, after delivery n of a message (from 1) or the last word
// that it is in progress, before it delivers the message again.
function waitMs(r, n) {
  if (r.backoffMs.length === 0) return r.ackWaitMs;
  return r.backoffMs[Math.min(Math.max(n, 1), r.backoffMs.length) - 1];
}

// isLast says whether delivery n of a message is its last: not acknowledged, it is a dead
// letter, delivered no more.
const isLast = (r, n) => r.maxDeliver > 0 && n >= r.maxDeliver;

// keepWorking tells the server, until the returned stop is called, that msg is still being
// worked on: msg.working() every third of the wait in force for this delivery, so that work
// longer than the ack wait is not delivered again meanwhile — to this host, or to the seat's
// other holder. Three chances before the wait runs out, so that one late is not a redelivery.
function keepWorking(msg, r) {
  const timer = setInterval(() => msg.working(), waitMs(r, msg.info.deliveryCount) / 3);
  return () => clearInterval(timer);
}

const seconds = (ms) => `${ms / 1000}s`;

function describeRedelivery(r) {
  const deliveries = r.maxDeliver > 0 ? `at most ${r.maxDeliver} deliveries` : "deliveries unlimited";
  if (r.backoffMs.length > 0) return `redelivered after ${r.backoffMs.map(seconds).join(", ")}, ${deliveries}`;
  return `ack wait ${seconds(r.ackWaitMs)}, ${deliveries}`;
}

// consume binds the existing consumer stream/consumer and hands its deliveries to handle, one at
// a time, with what the consumer's info says of redelivery, until stopped. It is the one place a
// consumer is bound.
//
// The mesh's bus.consumers says whether its consumers are pulled (the default) or pushed, and
// the consumer's own info says which it is: consume asks the server about the consumer
// ($JS.API.CONSUMER.INFO.<stream>.<consumer>, the one JetStream API call a host is granted) and
// binds it as what it is. A consumer with a deliver subject is pushed: getPushConsumer
// subscribes that subject in the consumer's deliver group, which the library takes from the
// info. One without is pulled: the binding asks for messages on
// $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer> and takes them, and the server's heartbeats, on
// the host's inbox. Binding by the info, not by trying one kind and then the other: a client
// that binds a pull consumer as pushed is not always told (npm nats v2 waits on a subject
// nothing is delivered to). Never js.streams.get or a consumer create: a host is granted
// neither.
async function consume(js, jsm, stream, consumer, handle) {
  const info = await jsm.consumers.info(stream, consumer);
  const c = typeof info.config.deliver_subject === "string"
    ? await js.consumers.getPushConsumer(stream, consumer)
    : js.consumers.getConsumerFromInfo(info);
  const redelivery = redeliveryOf(info.config);
  const messages = await c.consume();
  const done = (async () => {
    for await (const msg of messages) {
      await handle(msg, redelivery);
    }
  })();
  return { messages, done, redelivery };
}

// parseDuration reads 500ms, 6s or 2m, in milliseconds; NaN when it is none of those.
function parseDuration(s) {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(s);
  if (!m) return NaN;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60000 }[m[2]];
}

async function main() {
  let args;
  try {
    args = parseArgs({
      options: {
        membership: { type: "string" },
        follow: { type: "boolean", default: false },
        seat: { type: "string" },
        emit: { type: "string" },
        work: { type: "string" },
        publish: { type: "string" },
        message: { type: "string", default: "" },
      },
      strict: true,
    }).values;
  } catch (err) {
    log(err.message);
    return 2;
  }
  if (args.publish && (args.seat || args.emit || args.follow)) {
    log("--publish publishes once and exits; it does not take --follow, --seat or --emit");
    return 2;
  }
  if (args.emit && !args.seat) {
    log("--emit reports a seat's event, so it needs --seat");
    return 2;
  }
  const workMs = args.work === undefined ? 0 : parseDuration(args.work);
  if (Number.isNaN(workMs)) {
    log(`--work ${JSON.stringify(args.work)}: give how long each piece of work takes, as 500ms, 6s or 2m`);
    return 2;
  }
  if (workMs > 0 && !args.seat) {
    log("--work is how long a seat's work takes, so it needs --seat");
    return 2;
  }

  let m;
  try {
    m = await readMembership(args.membership);
  } catch (err) {
    log(err.message);
    return 1;
  }
  const inst = instanceOf(m.user);
  if (!inst) {
    log(`${m.user} is not a module instance (<node>.<module>); issue the membership of one, e.g. meshctl credentials issue beta.postman`);
    return 1;
  }
  let nc;
  let lost;
  try {
    let server;
    ({ nc, server, lost } = await join(m, args.membership));
    // The server it reached, not the membership's address: on a cluster that may be down, and
    // the connection started at another of its servers.
    log(`joined ${server} as ${m.user}`);
  } catch (err) {
    log(`joining the bus as ${JSON.stringify(m.user)}: ${describe(err, m.user)}`);
    return 1;
  }
  // Refusals of what no request waits for (a subscription, a plain publish) arrive only here.
  (async () => {
    for await (const s of nc.status()) {
      switch (s.type) {
        case "error":
          if (refusal(s.error)) log(`refused: ${describe(s.error, m.user)}`);
          break;
        case "disconnect":
          log("disconnected");
          lost();
          break;
        case "reconnecting":
          lost();
          break;
        case "reconnect":
          log(`reconnected to ${nc.getServer()}`);
          break;
      }
    }
  })();
  const js = jetstream(nc);
  // Without checkAPI: the manager would ask for the account's JetStream info ($JS.API.INFO),
  // which no host is granted. It is used for consumer info alone.
  const jsm = await js.jetstreamManager(false);

  if (args.publish) {
    try {
      const ack = await js.publish(args.publish, args.message, { timeout: opTimeout });
      log(`published to ${args.publish}: stream ${ack.stream} keeps it as message ${ack.seq}`);
      return 0;
    } catch (err) {
      log(`publishing to ${args.publish} as ${JSON.stringify(m.user)}: ${describe(err, m.user)}`);
      return 1;
    } finally {
      await nc.close();
    }
  }

  const ack = async (msg) => {
    try {
      // ackAck waits for the server to take the acknowledgement: a refused ack is reported by
      // name, not seen thirty seconds later as a redelivery that looks like lost work.
      await msg.ackAck({ timeout: opTimeout });
    } catch (err) {
      log(`acknowledging ${msg.subject} as ${JSON.stringify(m.user)}: ${describe(err, m.user)}`);
    }
  };

  const taking = [];
  const stopAll = async () => {
    for (const t of taking) await t.messages.close();
    await Promise.allSettled(taking.map((t) => t.done));
  };
  // A module that only holds a seat has no events consumer, and no grant to ask about one:
  // asking would be a refusal in the bus's log for every start. So it follows only when told
  // to, or when following is the only job left.
  if (args.follow || !args.seat) {
    const eventsConsumer = instanceConsumer(inst.node, inst.module);
    try {
      taking.push(await consume(js, jsm, streamEvents, eventsConsumer, async (msg) => {
        print(`event ${msg.subject} ${msg.string()}`);
        await ack(msg);
      }));
      log(`following its events on consumer ${eventsConsumer}`);
    } catch (err) {
      const what = `taking deliveries of consumer ${eventsConsumer} on stream ${streamEvents} as ${JSON.stringify(m.user)}: ${describe(err, m.user)}`;
      // A module that follows nothing has no consumer, and no grant to ask about one.
      log(refusal(err) ? `${what}\n(a module that follows nothing has no consumer: give --seat to hold a seat, or --publish)` : what);
      await nc.close();
      return 1;
    }
  }
  if (args.seat) {
    const stream = seatStream(args.seat);
    const consumer = workerConsumer(args.seat);
    try {
      const worker = await consume(js, jsm, stream, consumer, async (msg, r) => {
        print(`work ${msg.subject} ${msg.string()}`);
        const n = msg.info.deliveryCount;
        if (n > 1) log(`${msg.subject} is delivery ${n} of it`);
        if (workMs > 0) {
          // Work that may outlast the worker's ack wait says it is in progress, at the pace the
          // worker's info set, not the server's default: the description may have shortened it.
          const stop = keepWorking(msg, r);
          await new Promise((resolve) => setTimeout(resolve, workMs)); // the stand-in for real work
          stop();
        }
        if (args.emit) {
          const subject = seatEvent(args.seat, args.emit);
          try {
            await js.publish(subject, msg.data, { timeout: opTimeout });
          } catch (err) {
            log(`publishing to ${subject} as ${JSON.stringify(m.user)}: ${describe(err, m.user)}`);
            // Not acknowledged: the work comes back after the wait in force, or on its last
            // delivery is a dead letter.
            log(isLast(r, n)
              ? `${msg.subject} is left unacknowledged on its last delivery (${n} of ${r.maxDeliver}): a dead letter, never delivered again (meshctl status counts it)`
              : `${msg.subject} is left unacknowledged: it comes back in ${seconds(waitMs(r, n))}`);
            return;
          }
        }
        await ack(msg);
      });
      taking.push(worker);
      log(`holding seat ${args.seat}: ${describeRedelivery(worker.redelivery)}`);
    } catch (err) {
      log(`taking deliveries of consumer ${consumer} on stream ${stream} as ${JSON.stringify(m.user)}: ${describe(err, m.user)}`);
      await stopAll();
      await nc.close();
      return 1;
    }
  }

  await new Promise((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  log("leaving: finishing the work in hand");
  // Stop taking deliveries and let the handlers finish those received, while the connection is
  // still whole for their acks; then drain the connection itself.
  await stopAll();
  await nc.drain();
  return 0;
}

process.exitCode = await main();
