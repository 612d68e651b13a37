package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubesandbox/templatecenter/adapters/httpapi/auth"
)

// The variables the CLI reads its public API credentials from, so they stay
// out of process listings and shell history.
const (
	EnvToken     = "CUBE_MASTER_TOKEN"
	EnvUserID    = "CUBE_MASTER_USER_ID"
	EnvSecretKey = "CUBE_MASTER_SECRET_KEY"
)

// credentials authenticate the CLI on the master's public API: a bearer
// token, or upstream's signed headers (user id and secret key). The zero
// value sends nothing (a master with authentication off).
type credentials struct {
	token          string
	userID, secret string
}

// apply sets r's credential headers: a fresh timestamp and nonce per
// request when signing.
func (c credentials) apply(r *http.Request) error {
	switch {
	case c.token != "":
		r.Header.Set("Authorization", "Bearer "+c.token)
	case c.userID != "":
		nonce := make([]byte, 16)
		if _, err := rand.Read(nonce); err != nil {
			return err
		}
		auth.SetSigned(r.Header, c.userID, c.secret, hex.EncodeToString(nonce), auth.MethodSHA256, time.Now())
	}
	return nil
}

// authHint is appended to a 130401 refusal.
const authHint = " (the master authenticates its API: set $" + EnvToken + ", or $" + EnvUserID + " and $" + EnvSecretKey + ")"

// credentialFlags are the global flags that carry credentials.
type credentialFlags struct {
	token, userID, secret string
}

func (f *credentialFlags) register(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.token, "token", "", "bearer token of the master's public API; visible to other users in the process list, prefer $"+EnvToken)
	pf.StringVar(&f.userID, "user-id", "", "user id to sign requests as (upstream's signed headers; default $"+EnvUserID+")")
	pf.StringVar(&f.secret, "secret-key", "", "secret key of --user-id; visible to other users in the process list, prefer $"+EnvSecretKey+" or the prompt")
}

// resolve picks the credentials: flags (with a warning for the secret
// ones, whose values are never printed), else the environment; a user id
// without a secret key is asked for on a terminal.
func (f *credentialFlags) resolve(cmd *cobra.Command) (credentials, error) {
	flags, stderr := cmd.Flags(), cmd.ErrOrStderr()
	pick := func(flag, env string, secret bool) string {
		if flags.Changed(flag) {
			if secret {
				fmt.Fprintf(stderr, "cubemastercli: warning: --%s is visible to other users in the process list; prefer $%s\n", flag, env)
			}
			v, _ := flags.GetString(flag)
			return strings.TrimSpace(v)
		}
		return strings.TrimSpace(os.Getenv(env))
	}
	c := credentials{token: pick("token", EnvToken, true), userID: pick("user-id", EnvUserID, false)}
	if c.token != "" && c.userID != "" {
		if flags.Changed("token") == flags.Changed("user-id") {
			return c, errors.New("give a bearer token (--token, $" + EnvToken + ") or a user id to sign with (--user-id, $" + EnvUserID + "), not both")
		}
		// A flag wins over the other kind's variable.
		if flags.Changed("token") {
			c.userID = ""
		} else {
			c.token = ""
		}
	}
	if c.userID == "" {
		return c, nil
	}
	c.secret = pick("secret-key", EnvSecretKey, true)
	if c.secret != "" {
		return c, nil
	}
	tty, ok := cmd.InOrStdin().(*os.File)
	if !ok || !canPrompt(tty) {
		return c, fmt.Errorf("user id %s has no secret key: set $%s", c.userID, EnvSecretKey)
	}
	fmt.Fprintf(stderr, "Secret key for %s: ", c.userID)
	secret, err := readHidden(tty)
	fmt.Fprintln(stderr)
	if err != nil {
		return c, fmt.Errorf("read the secret key: %w (set $%s instead)", err, EnvSecretKey)
	}
	if c.secret = strings.TrimSpace(secret); c.secret == "" {
		return c, fmt.Errorf("empty secret key for %s", c.userID)
	}
	return c, nil
}
