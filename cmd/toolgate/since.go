package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// age is a flag's span of time back from now, as people write it for a
// record kept for months: "30d", "12h", "1h30m". Days are 24 hours. Zero
// means no limit.
type age time.Duration

func (a *age) String() string {
	d := time.Duration(*a)
	if d == 0 {
		return "0" // no limit; help shows no default
	}
	if d%(24*time.Hour) == 0 {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return d.String()
}

func (a *age) Set(s string) error {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return fmt.Errorf("%q is not a number of days (say 30d)", s)
		}
		*a = age(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a span of time (say 30d, 12h or 90m)", s)
	}
	*a = age(d)
	return nil
}

func (a *age) Type() string { return "age" }

// since is the moment a of ago; zero for no limit.
func (a age) since(now time.Time) time.Time {
	if a == 0 {
		return time.Time{}
	}
	return now.Add(-time.Duration(a))
}
