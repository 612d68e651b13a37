package core

import (
	"errors"
	"testing"
)

func TestImageConfigJSON(t *testing.T) {
	c := ImageConfig{Entrypoint: []string{"/init"}, Cmd: []string{"run"}, Env: []string{"A=1"}, WorkingDir: "/w", User: "app"}
	s, err := c.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"Entrypoint":["/init"],"Cmd":["run"],"Env":["A=1"],"WorkingDir":"/w","User":"app"}`; s != want {
		t.Errorf("JSON = %s, want %s", s, want)
	}
	back, err := ParseImageConfigJSON(s)
	if err != nil || back.User != "app" || back.Entrypoint[0] != "/init" {
		t.Errorf("round trip = %+v, %v", back, err)
	}
	// Upstream rows may carry nulls from docker inspect.
	if got, err := ParseImageConfigJSON(`{"Entrypoint":null,"Cmd":["sh"],"Env":null,"WorkingDir":"","User":""}`); err != nil || got.Cmd[0] != "sh" {
		t.Errorf("nulls: %+v, %v", got, err)
	}
	if got, err := ParseImageConfigJSON(" "); err != nil || got.Cmd != nil {
		t.Errorf("empty: %+v, %v", got, err)
	}
	if _, err := ParseImageConfigJSON("{"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("bad JSON: %v", err)
	}
}
