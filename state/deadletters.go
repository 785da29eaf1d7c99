package state

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// DeadLetter is one message the server gave up on: delivered by Consumer (of Stream) as many
// times as its max_deliver allows, Deliveries, and never acknowledged. StreamSeq names the
// message; At is when watch heard of it.
type DeadLetter struct {
	Stream     string
	Consumer   string
	StreamSeq  uint64
	Deliveries uint64
	At         time.Time
}

// ConsumerDeadLetters is what one consumer's dead letters came to: how many, when the first
// and the latest were heard, and which message the latest was and how often it was delivered.
type ConsumerDeadLetters struct {
	Stream         string    `json:"stream"`
	Consumer       string    `json:"consumer"`
	Count          int64     `json:"count"`
	FirstAt        time.Time `json:"first_at"`
	LastAt         time.Time `json:"last_at"`
	LastStreamSeq  uint64    `json:"last_stream_seq"`
	LastDeliveries uint64    `json:"last_deliveries"`
}

// maxDeadLetterMessages bounds the messages remembered for telling a dead letter announced
// again from a new one. The server announces each once; a second announcement (a consumer's
// leader changing in a cluster) comes within moments, long before this many others.
const maxDeadLetterMessages = 1000

// RecordDeadLetters adds each of letters to its consumer's count, once per message: a message
// already counted (the same consumer and stream sequence, among the latest
// maxDeadLetterMessages) is not counted again. It returns the letters it counted, in order, all
// in one transaction.
func (s *Store) RecordDeadLetters(ctx context.Context, letters []DeadLetter) ([]DeadLetter, error) {
	var counted []DeadLetter
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		counted = counted[:0]
		for _, l := range letters {
			res, err := tx.ExecContext(ctx, `INSERT INTO dead_letter_messages (stream, consumer, stream_seq, deliveries, at)
				VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
				l.Stream, l.Consumer, int64(l.StreamSeq), int64(l.Deliveries), formatTime(l.At))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			if n == 0 {
				continue // counted already
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO dead_letters (stream, consumer, count, first_at, last_at, last_stream_seq, last_deliveries)
				VALUES (?, ?, 1, ?, ?, ?, ?)
				ON CONFLICT (stream, consumer) DO UPDATE SET count = dead_letters.count + 1, last_at = excluded.last_at,
					last_stream_seq = excluded.last_stream_seq, last_deliveries = excluded.last_deliveries`,
				l.Stream, l.Consumer, formatTime(l.At), formatTime(l.At), int64(l.StreamSeq), int64(l.Deliveries)); err != nil {
				return err
			}
			counted = append(counted, l)
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM dead_letter_messages WHERE rowid NOT IN
			(SELECT rowid FROM dead_letter_messages ORDER BY rowid DESC LIMIT ?)`, maxDeadLetterMessages)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("recording dead letters in %s: %w", s.dir, err)
	}
	return counted, nil
}

// DeadLetters returns every consumer's dead letters counted so far, by stream and consumer.
func (s *Store) DeadLetters(ctx context.Context) ([]ConsumerDeadLetters, error) {
	var out []ConsumerDeadLetters
	err := queryEach(ctx, s.db, `SELECT stream, consumer, count, first_at, last_at, last_stream_seq, last_deliveries
		FROM dead_letters ORDER BY stream, consumer`, func(rows *sql.Rows) error {
		var d ConsumerDeadLetters
		var first, last string
		var seq, deliveries int64
		if err := rows.Scan(&d.Stream, &d.Consumer, &d.Count, &first, &last, &seq, &deliveries); err != nil {
			return err
		}
		var err error
		if d.FirstAt, err = parseTime(first); err != nil {
			return err
		}
		if d.LastAt, err = parseTime(last); err != nil {
			return err
		}
		d.LastStreamSeq, d.LastDeliveries = uint64(seq), uint64(deliveries)
		out = append(out, d)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the dead letters in %s: %w", s.dir, err)
	}
	return out, nil
}
