package entstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cubesandbox/templatecenter/ent/migrate"
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
	tick       atomic.Int64 // nanoseconds: the coarsest time the tables keep (0: a microsecond)
}

// tick is the smallest step of time every timestamp column of the store's
// tables keeps: a microsecond on the tables this service creates, a
// millisecond or a whole second on tables an adopted upstream database
// keeps as they were (datetime(3), datetime). Stamps are truncated to it
// so a stamp read back equals the one written (MySQL would round it), and
// a row's updated_at steps by at least one tick, so the compare-and-set on
// it still sees every write.
func (s *Store) tick() time.Duration {
	if t := s.clock.tick.Load(); t > 0 {
		return time.Duration(t)
	}
	return time.Microsecond
}

// measureTick reads the coarsest fractional-second precision of the
// timestamp columns of the store's tables and sets the tick from it. No
// tables yet (before Migrate) leaves a microsecond.
func (s *Store) measureTick(ctx context.Context) error {
	var q string
	switch s.dialect {
	case migrations.MySQL:
		q = "SELECT MIN(datetime_precision) FROM information_schema.columns WHERE table_schema = DATABASE() " +
			"AND data_type IN ('datetime', 'timestamp') AND table_name IN (%s)"
	case migrations.Postgres:
		q = "SELECT MIN(datetime_precision) FROM information_schema.columns WHERE table_schema = current_schema() " +
			"AND data_type LIKE 'timestamp%%' AND table_name IN (%s)"
	default:
		return nil // SQLite keeps the text the store writes
	}
	names := make([]string, len(migrate.Tables))
	for i, t := range migrate.Tables {
		names[i] = "'" + t.Name + "'"
	}
	var p sql.NullInt64
	if err := s.db.QueryRowContext(ctx, fmt.Sprintf(q, strings.Join(names, ", "))).Scan(&p); err != nil {
		return fmt.Errorf("read the precision of the timestamp columns: %w", err)
	}
	tick := time.Microsecond
	if p.Valid {
		tick = time.Second
		for i := int64(0); i < p.Int64 && tick > time.Microsecond; i++ {
			tick /= 10
		}
	}
	s.clock.tick.Store(int64(tick))
	return nil
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
