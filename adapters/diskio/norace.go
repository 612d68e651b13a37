//go:build !race

package diskio

// raceEnabled: built with -race (see race.go).
const raceEnabled = false
