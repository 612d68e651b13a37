package entstore

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"

	"github.com/cubesandbox/templatecenter/ent/migrate/migrations"
)

// clockRefresh is how often the offset to the database's clock is measured
// again (clocks drift; NTP steps them).
const clockRefresh = time.Minute

// dbClock holds the measured offset between the database's clock and this
// host's. Rows are stamped with the database's time, so every writer, on
// any host, stamps with one clock, and staleness is judged against it.
type dbClock struct {
	offset     atomic.Int64 // nanoseconds: database minus this host
	measuredAt atomic.Int64 // unix nanoseconds of the last measurement (0: never)
	busy       atomic.Bool
}

func (s *Store) clockOffset() time.Duration {
	if s.dialect != migrations.SQLite {
		if last := s.clock.measuredAt.Load(); time.Since(time.Unix(0, last)) > clockRefresh && s.clock.busy.CompareAndSwap(false, true) {
			go func() {
				defer s.clock.busy.Store(false)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				s.measureClock(ctx)
			}()
		}
	}
	return time.Duration(s.clock.offset.Load())
}

// measureClock reads the database's clock once and records the offset,
// taking this host's clock at the middle of the round trip. A failure
// keeps the last offset (0 at first): the store then stamps with its host's
// clock, as it did before, until the next measurement.
func (s *Store) measureClock(ctx context.Context) {
	var q string
	switch s.dialect {
	case migrations.MySQL:
		q = "SELECT UNIX_TIMESTAMP(NOW(6))"
	case migrations.Postgres:
		q = "SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8"
	default:
		return // SQLite is a file on this host: its clock is ours
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	before := time.Now()
	var epoch sql.NullFloat64
	if err := s.db.QueryRowContext(ctx, q).Scan(&epoch); err != nil || !epoch.Valid {
		return
	}
	after := time.Now()
	mid := before.Add(after.Sub(before) / 2)
	db := time.Unix(0, int64(epoch.Float64*1e9))
	s.clock.offset.Store(int64(db.Sub(mid)))
	s.clock.measuredAt.Store(after.UnixNano())
}

// Now implements ports.Store: the database's clock.
func (s *Store) Now(context.Context) (time.Time, error) {
	if err := s.check(); err != nil {
		return time.Time{}, err
	}
	return s.now(), nil
}
