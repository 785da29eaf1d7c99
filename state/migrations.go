package state

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations[i] takes the schema from version i to version i+1 (PRAGMA user_version). Append
// only: a migration that shipped is never edited, because stores in the field already ran it.
//
// Times are TEXT in timeLayout. Tables are STRICT so that a value of the wrong type is an error
// rather than silently stored.
var migrations = []string{
	// 1: credentials and the history of applies.
	`CREATE TABLE credentials (
		principal TEXT PRIMARY KEY NOT NULL,
		hash      TEXT NOT NULL,
		minted_at TEXT NOT NULL,
		operation TEXT NOT NULL
	) STRICT;
	CREATE TABLE applies (
		id         INTEGER PRIMARY KEY AUTOINCREMENT, -- never reused: holder_changes refer to it
		started    TEXT NOT NULL,
		finished   TEXT NOT NULL,
		user       TEXT NOT NULL,
		host       TEXT NOT NULL,
		git_commit TEXT NOT NULL,
		summary    TEXT NOT NULL,
		outcome    TEXT NOT NULL
	) STRICT;`,

	// 2: the last applied inventory and the log of holder changes.
	`CREATE TABLE inventory_nodes (
		node TEXT PRIMARY KEY NOT NULL
	) STRICT;
	CREATE TABLE inventory_instances (
		node   TEXT NOT NULL REFERENCES inventory_nodes (node),
		module TEXT NOT NULL,
		PRIMARY KEY (node, module)
	) STRICT;
	CREATE TABLE inventory_seats (
		seat TEXT PRIMARY KEY NOT NULL
	) STRICT;
	CREATE TABLE inventory_holders (
		seat   TEXT PRIMARY KEY NOT NULL REFERENCES inventory_seats (seat),
		node   TEXT NOT NULL,
		module TEXT NOT NULL,
		FOREIGN KEY (node, module) REFERENCES inventory_instances (node, module)
	) STRICT;
	CREATE TABLE holder_changes (
		id          INTEGER PRIMARY KEY AUTOINCREMENT,
		at          TEXT NOT NULL,
		seat        TEXT NOT NULL,
		from_node   TEXT,
		from_module TEXT,
		to_node     TEXT,
		to_module   TEXT,
		apply_id    INTEGER REFERENCES applies (id),
		CHECK ((from_node IS NULL) = (from_module IS NULL)),
		CHECK ((to_node IS NULL) = (to_module IS NULL))
	) STRICT;`,

	// 3: what the controller knows of the live mesh: each enrolled node's public key, what it
	// was last declared (the generation, the digest that says whether it changed, and for each
	// instance the hash its sealed credential was minted with and the sealed copy — never the
	// plaintext), and the last report each node filed.
	`CREATE TABLE enrolments (
		node        TEXT PRIMARY KEY NOT NULL,
		public_key  BLOB NOT NULL,
		enrolled_at TEXT NOT NULL
	) STRICT;
	CREATE TABLE declarations (
		node        TEXT PRIMARY KEY NOT NULL REFERENCES enrolments (node),
		generation  INTEGER NOT NULL,
		digest      TEXT NOT NULL,
		declared_at TEXT NOT NULL
	) STRICT;
	CREATE TABLE declared_credentials (
		node      TEXT NOT NULL REFERENCES declarations (node),
		principal TEXT NOT NULL,
		hash      TEXT NOT NULL,
		sealed    BLOB NOT NULL,
		PRIMARY KEY (node, principal)
	) STRICT;
	CREATE TABLE reports (
		node        TEXT PRIMARY KEY NOT NULL,
		generation  INTEGER NOT NULL,
		applied     TEXT NOT NULL,
		failed      TEXT NOT NULL,
		reported_at TEXT NOT NULL,
		recorded_at TEXT NOT NULL
	) STRICT;`,

	// 4: the refusals the bus reported lately, one row per distinct refusal with the advice
	// watch logged for it, so that `meshctl status` can list them; RecordRefusal keeps the
	// table to the newest maxRefusals rows.
	`CREATE TABLE refusals (
		user       TEXT NOT NULL,
		op         TEXT NOT NULL,
		subject    TEXT NOT NULL,
		queue      TEXT NOT NULL,
		advice     TEXT NOT NULL,
		count      INTEGER NOT NULL,
		first_at   TEXT NOT NULL,
		last_at    TEXT NOT NULL,
		PRIMARY KEY (user, op, subject, queue)
	) STRICT;`,

	// 5: the store's identity, made once with the store: it names the store as the manager of
	// the buses it applies to (the stamp of every accounts file it writes), so that another
	// store in front of the same bus is told apart and refused rather than taken for it. And
	// the principals whose credential this store took away (revoked, or an enrolment identity
	// locked again): with the credentials it holds, they are every principal whose entry on a
	// server this store may change. A working hash on a server that the store neither minted
	// nor revoked is a host that logs in today by someone else's credential.
	`CREATE TABLE identity (
		id         TEXT NOT NULL,
		created_at TEXT NOT NULL
	) STRICT;
	INSERT INTO identity (id, created_at) VALUES (lower(hex(randomblob(16))), strftime('%Y-%m-%dT%H:%M:%fZ', 'now'));
	CREATE TABLE revocations (
		principal  TEXT PRIMARY KEY NOT NULL,
		revoked_at TEXT NOT NULL
	) STRICT;`,

	// 6: whether the store's copy on the bus may be behind it (replica.go): set in the
	// transaction of a change, cleared once the replica is known to hold every change (a
	// catch-up, a replica let go in step). A process that died in between leaves it set, and
	// the next to keep the replica sends the whole store. A store starts behind: its copy on
	// the bus is made whole first.
	`CREATE TABLE replica (
		behind INTEGER NOT NULL CHECK (behind IN (0, 1))
	) STRICT;
	INSERT INTO replica (behind) VALUES (1);`,

	// 7: which copy of the store this file is. Every copy of one store shares its identity (a
	// restore makes the same store again), and the fence on the bus names the copy that last
	// wrote there: a copy that finds its own name there knows the bus holds nothing it has not
	// (it sends what it may have missed sending), and one that finds another's takes the bus's
	// content for the store's (replica's Fence; reconcile's owner.go).
	`ALTER TABLE replica ADD COLUMN copy TEXT NOT NULL DEFAULT '';
	UPDATE replica SET copy = lower(hex(randomblob(16)));`,

	// 8: refusals add up by the rule their subject falls under (explain's Rule) rather than by
	// the subject itself: a client without its inbox prefix refuses a new random subject on
	// every connection, and each would have been a row of its own. A row keeps the latest
	// subject refused; the rows kept so far are each their own rule.
	`CREATE TABLE refusals_by_rule (
		user       TEXT NOT NULL,
		op         TEXT NOT NULL,
		rule       TEXT NOT NULL,
		subject    TEXT NOT NULL,
		queue      TEXT NOT NULL,
		advice     TEXT NOT NULL,
		count      INTEGER NOT NULL,
		first_at   TEXT NOT NULL,
		last_at    TEXT NOT NULL,
		PRIMARY KEY (user, op, rule, queue)
	) STRICT;
	INSERT INTO refusals_by_rule (user, op, rule, subject, queue, advice, count, first_at, last_at)
		SELECT user, op, subject, subject, queue, advice, count, first_at, last_at FROM refusals;
	DROP TABLE refusals;
	ALTER TABLE refusals_by_rule RENAME TO refusals;`,

	// 9: the dead letters watch heard of: per consumer, how many messages reached its
	// max_deliver unacknowledged (dead_letters), and the latest of those messages, so that one
	// announced twice is counted once (dead_letter_messages, kept to the newest
	// maxDeadLetterMessages by RecordDeadLetters). Like the refusals, a log of this store's own.
	`CREATE TABLE dead_letters (
		stream          TEXT NOT NULL,
		consumer        TEXT NOT NULL,
		count           INTEGER NOT NULL,
		first_at        TEXT NOT NULL,
		last_at         TEXT NOT NULL,
		last_stream_seq INTEGER NOT NULL,
		last_deliveries INTEGER NOT NULL,
		PRIMARY KEY (stream, consumer)
	) STRICT;
	CREATE TABLE dead_letter_messages (
		stream     TEXT NOT NULL,
		consumer   TEXT NOT NULL,
		stream_seq INTEGER NOT NULL,
		deliveries INTEGER NOT NULL,
		at         TEXT NOT NULL,
		PRIMARY KEY (stream, consumer, stream_seq)
	) STRICT;`,
	// 10: bus.auth jwt: each principal's user key and the user JWT last issued for it (none
	// secret), a JWT issued whose account JWT is not yet proven on the servers, and the keys
	// to revoke until a proven push carries their revocation.
	`CREATE TABLE jwt_users (
		principal TEXT PRIMARY KEY NOT NULL,
		user_key  TEXT NOT NULL,
		jwt       TEXT NOT NULL,
		pending   TEXT NOT NULL DEFAULT '',
		issued_at TEXT NOT NULL,
		operation TEXT NOT NULL
	) STRICT;
	CREATE TABLE jwt_revoked (
		user_key  TEXT PRIMARY KEY NOT NULL,
		principal TEXT NOT NULL,
		at        INTEGER NOT NULL
	) STRICT;`,

	// 11: a key to revoke is kept once a proven push carried its revocation, marked settled,
	// rather than deleted: it is the trace of the user dropped and of the revocation done that
	// a copy of the store on the bus, behind, is told of (replica.go's catchUp). Deleted, a
	// copy that missed it would keep both, and a store restored from it would revoke the key
	// again and hold the dropped principal's user as its own.
	`ALTER TABLE jwt_revoked ADD COLUMN settled INTEGER NOT NULL DEFAULT 0 CHECK (settled IN (0, 1));`,
}

// schemaVersion is the version this binary writes.
var schemaVersion = len(migrations)

// checkVersion refuses a schema newer than this binary knows.
func checkVersion(version int) error {
	if version > schemaVersion {
		return fmt.Errorf("%w: the file has schema version %d and this meshctl knows versions up to %d; upgrade meshctl to use this store",
			ErrNewerSchema, version, schemaVersion)
	}
	return nil
}

// migrate applies the pending migrations in one transaction, so a failure (or a crash) leaves
// the previous version intact rather than half a schema. The version is read again inside the
// transaction: two meshctl processes opening a new store at once must not both migrate it.
func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return classify(err)
	}
	defer tx.Rollback()
	var version int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&version); err != nil {
		return classify(err)
	}
	if err := checkVersion(version); err != nil {
		return err
	}
	if version == schemaVersion {
		return nil
	}
	for v := version; v < schemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrating the schema from version %d to %d: %w", v, v+1, err)
		}
	}
	// PRAGMA takes no bound parameters; schemaVersion is an int of our own.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("recording schema version %d: %w", schemaVersion, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("committing the schema migration to version %d: %w", schemaVersion, err)
	}
	return nil
}
