package waitq

import (
	"context"
	"testing"
	"time"
)

// TestLineServesEveryoneAndForgets: waiters of one name all get their turn
// once the first is done, another name is not held up meanwhile, and the
// name is dropped once nobody waits.
func TestLineServesEveryoneAndForgets(t *testing.T) {
	l := New()
	ctx := context.Background()
	first, err := l.Wait(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 3)
	for i := range 3 {
		go func() {
			done, err := l.Wait(ctx, "n")
			if err != nil {
				t.Error(err)
				return
			}
			order <- i
			done()
		}()
		// Let each goroutine reach the line before the next starts.
		for {
			l.mu.Lock()
			refs := l.names["n"].refs
			l.mu.Unlock()
			if refs == i+2 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	other, err := l.Wait(ctx, "other") // another name is not held up
	if err != nil {
		t.Fatal(err)
	}
	other()
	first()
	got := map[int]bool{}
	for range 3 {
		got[<-order] = true
	}
	if len(got) != 3 {
		t.Fatalf("served %v", got)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.names) != 0 {
		t.Errorf("%d names kept after everyone left", len(l.names))
	}
}

// TestLineWaitHonoursContext: a waiter whose context ends leaves the line
// without the turn.
func TestLineWaitHonoursContext(t *testing.T) {
	l := New()
	done, err := l.Wait(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Wait(ctx, "n"); err == nil {
		t.Fatal("a cancelled waiter got the turn")
	}
	done()
	again, err := l.Wait(context.Background(), "n")
	if err != nil {
		t.Fatal(err)
	}
	again()
}
