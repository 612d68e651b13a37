package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// codeSuccess is the envelope ret_code of a successful call; codeAuth the
// master's refusal of missing or wrong credentials.
const (
	codeSuccess = 200
	codeAuth    = 130401
)

// client talks to one master picked at random from the --address list.
type client struct {
	base string
	http *http.Client
	cred credentials
}

func newClient(addresses string, port int, timeout time.Duration) (*client, error) {
	var hosts []string
	for _, h := range strings.Split(addresses, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("--address: no host given")
	}
	host := hosts[rand.IntN(len(hosts))]
	// A host that already carries a port keeps it.
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, fmt.Sprint(port))
	}
	return &client{base: "http://" + host, http: &http.Client{Timeout: timeout}}, nil
}

// formBody is a body sent as it is (a multipart form) instead of as JSON.
type formBody struct {
	data        []byte
	contentType string
}

type ret struct {
	Code int    `json:"ret_code"`
	Msg  string `json:"ret_msg"`
}

// do sends one request and returns the raw body once both the HTTP status
// and the envelope say success. out, when non-nil, receives the decoded body.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any) ([]byte, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	ctype := "application/json"
	if f, ok := body.(formBody); ok {
		rd, ctype = bytes.NewReader(f.data), f.contentType
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if err := c.cred.apply(req); err != nil {
		return nil, err
	}
	req.Header.Set("X-Caller", "mastercli")
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading response: %w", method, path, err)
	}
	var env struct {
		Ret *ret `json:"ret"`
	}
	jsonErr := json.Unmarshal(raw, &env)
	if resp.StatusCode != http.StatusOK {
		reason := strings.TrimSpace(string(raw))
		if jsonErr == nil && env.Ret != nil {
			reason = fmt.Sprintf("ret_code %d: %s", env.Ret.Code, env.Ret.Msg)
		}
		if len(reason) > 200 {
			reason = reason[:200] + "..."
		}
		return raw, fmt.Errorf("%s %s: HTTP %s: %s", method, path, resp.Status, reason)
	}
	if jsonErr != nil {
		return raw, fmt.Errorf("%s %s: response is not JSON: %v", method, path, jsonErr)
	}
	if env.Ret == nil {
		return raw, fmt.Errorf("%s %s: response has no ret envelope", method, path)
	}
	if env.Ret.Code == codeAuth {
		return raw, fmt.Errorf("%s %s: ret_code %d: %s%s", method, path, env.Ret.Code, env.Ret.Msg, authHint)
	}
	if env.Ret.Code != codeSuccess {
		return raw, fmt.Errorf("%s %s: ret_code %d: %s", method, path, env.Ret.Code, env.Ret.Msg)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("%s %s: decoding response: %w", method, path, err)
		}
	}
	return raw, nil
}
