package state

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Refusal is one kind of refusal the bus reported: this user was refused Op on subjects that
// fall under Rule (in queue group Queue), Count times between FirstAt and LastAt, Subject the
// latest of them, and what the description would have to say for it to be granted, or why
// nothing can. Rule is the subject with what changes from one connection or message to the
// next generalised (explain's Rule): a client without its inbox prefix is one kind, not one
// per connection.
type Refusal struct {
	User    string    `json:"user"`
	Op      string    `json:"op"`
	Rule    string    `json:"rule"`
	Subject string    `json:"subject"`
	Queue   string    `json:"queue,omitempty"`
	Advice  string    `json:"advice"`
	Count   int64     `json:"count"`
	FirstAt time.Time `json:"first_at"`
	LastAt  time.Time `json:"last_at"`
}

// maxRefusals bounds the refusals kept: a principal trying subjects at random must not grow the
// store without end. The oldest by LastAt go first.
const maxRefusals = 100

// RecordRefusal adds r.Count refusals of r's kind (user, op, rule and queue; a Rule of ""
// is the subject itself) at r.LastAt, keeping the first time it was seen, the newest subject
// and advice, and drops the oldest kinds beyond maxRefusals.
func (s *Store) RecordRefusal(ctx context.Context, r Refusal) error {
	if r.Rule == "" {
		r.Rule = r.Subject
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO refusals (user, op, rule, subject, queue, advice, count, first_at, last_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (user, op, rule, queue) DO UPDATE SET subject = excluded.subject, advice = excluded.advice,
				count = refusals.count + excluded.count, last_at = excluded.last_at`,
			r.User, r.Op, r.Rule, r.Subject, r.Queue, r.Advice, r.Count, formatTime(r.FirstAt), formatTime(r.LastAt)); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM refusals WHERE rowid NOT IN
			(SELECT rowid FROM refusals ORDER BY last_at DESC LIMIT ?)`, maxRefusals)
		return err
	})
	if err != nil {
		return fmt.Errorf("recording a refusal of %q in %s: %w", r.User, s.dir, err)
	}
	return nil
}

// Refusals returns up to limit refusals, the most recent first (limit <= 0: all kept).
func (s *Store) Refusals(ctx context.Context, limit int) ([]Refusal, error) {
	if limit <= 0 {
		limit = maxRefusals
	}
	rows, err := s.db.QueryContext(ctx, `SELECT user, op, rule, subject, queue, advice, count, first_at, last_at
		FROM refusals ORDER BY last_at DESC, user, rule LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("reading the refusals in %s: %w", s.dir, err)
	}
	defer rows.Close()
	var out []Refusal
	for rows.Next() {
		var r Refusal
		var first, last string
		if err := rows.Scan(&r.User, &r.Op, &r.Rule, &r.Subject, &r.Queue, &r.Advice, &r.Count, &first, &last); err != nil {
			return nil, fmt.Errorf("reading the refusals in %s: %w", s.dir, err)
		}
		if r.FirstAt, err = parseTime(first); err != nil {
			return nil, err
		}
		if r.LastAt, err = parseTime(last); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the refusals in %s: %w", s.dir, err)
	}
	return out, nil
}
