package podrunner

import "testing"

func TestExpandFollowsKubernetesRules(t *testing.T) {
	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"A": "alpha", "EMPTY": ""}[name]
		return v, ok
	}
	cases := map[string]string{
		"plain":          "plain",
		"$(A)":           "alpha",
		"x-$(A)-y":       "x-alpha-y",
		"$(MISSING)":     "$(MISSING)",
		"$$(A)":          "$(A)",
		"$(EMPTY)z":      "z",
		"cost $5":        "cost $5",
		"trailing $":     "trailing $",
		"unclosed $(A":   "unclosed $(A",
		"$(A)$(A)":       "alphaalpha",
		"$$$(A)":         "$alpha",
		"keep $x and $(": "keep $x and $(",
	}
	for in, want := range cases {
		if got := expand(in, lookup); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEnvironmentLaterDefinitionsWinAndKeepOrder(t *testing.T) {
	env := newEnvironment()
	env.set("A", "1")
	env.set("B", "2")
	env.set("A", "3")
	got := envList(env)
	if len(got) != 2 || got[0] != "A=3" || got[1] != "B=2" {
		t.Errorf("envList = %v", got)
	}
}
