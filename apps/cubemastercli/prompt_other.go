//go:build !linux

package main

import (
	"errors"
	"os"
)

// canPrompt is false: there is no echo-free prompt outside Linux.
func canPrompt(*os.File) bool { return false }

// readHidden has no echo-free prompt outside Linux.
func readHidden(*os.File) (string, error) {
	return "", errors.New("no password prompt on this platform")
}
