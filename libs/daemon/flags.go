package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FlagSet is a service's command line in which every flag is also read
// from an environment variable: a container sets the variables, a shell
// the flags, and `-h` names both. The value comes from the flag when it is
// given, else from the variable when it is set and not empty, else from
// the default. A variable that does not parse is an error of Parse, not a
// silent default.
//
// The constructors take the variable's name explicitly (ATOLL_<SERVICE>_<SETTING>
// by convention) so that it can be searched for; each appends it to the
// flag's usage text, so `-h` cannot forget one.
type FlagSet struct {
	fs     *flag.FlagSet
	getenv func(string) string
	envs   map[string]string // flag name -> its variable
	types  map[string]string // flag name -> its type's name in -h
	errs   []error
}

func newFlagSet(name string, getenv func(string) string) *FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return &FlagSet{fs: fs, getenv: getenv, envs: map[string]string{}, types: map[string]string{}}
}

// Env returns the environment variable of the flag name ("" for none).
func (f *FlagSet) Env(name string) string { return f.envs[name] }

// Names returns every flag's name, sorted.
func (f *FlagSet) Names() []string {
	var names []string
	f.fs.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	sort.Strings(names)
	return names
}

// String defines a string flag read from envVar when not given.
func (f *FlagSet) String(p *string, name, envVar, def, usage string) {
	*p = def
	if v := f.lookup(envVar); v != "" {
		*p = v
	}
	f.define(name, envVar, "string", usage, def, func(v string) error { *p = v; return nil })
}

// Int defines an int flag read from envVar when not given.
func (f *FlagSet) Int(p *int, name, envVar string, def int, usage string) {
	setter := func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("not an integer")
		}
		*p = n
		return nil
	}
	*p = def
	f.fromEnv(name, envVar, setter)
	f.define(name, envVar, "int", usage, strconv.Itoa(def), setter)
}

// Float64 defines a float flag read from envVar when not given.
func (f *FlagSet) Float64(p *float64, name, envVar string, def float64, usage string) {
	setter := func(v string) error {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errors.New("not a number")
		}
		*p = x
		return nil
	}
	*p = def
	f.fromEnv(name, envVar, setter)
	f.define(name, envVar, "float", usage, strconv.FormatFloat(def, 'g', -1, 64), setter)
}

// Duration defines a duration flag (Go syntax: 500ms, 30s, 5m) read from
// envVar when not given.
func (f *FlagSet) Duration(p *time.Duration, name, envVar string, def time.Duration, usage string) {
	setter := func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("not a duration (500ms, 30s, 5m)")
		}
		*p = d
		return nil
	}
	*p = def
	f.fromEnv(name, envVar, setter)
	f.define(name, envVar, "duration", usage, def.String(), setter)
}

// Bool defines a boolean flag read from envVar when not given.
func (f *FlagSet) Bool(p *bool, name, envVar string, def bool, usage string) {
	setter := func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("not a boolean (true or false)")
		}
		*p = b
		return nil
	}
	*p = def
	f.fromEnv(name, envVar, setter)
	f.fs.Var(boolValue{value{get: func() string { return strconv.FormatBool(*p) }, set: setter}}, name, usage+" ("+envVar+")")
	f.fs.Lookup(name).DefValue = strconv.FormatBool(def)
	f.envs[name] = envVar
}

func (f *FlagSet) lookup(envVar string) string {
	if envVar == "" {
		panic("daemon: a flag without its environment variable")
	}
	return f.getenv(envVar)
}

func (f *FlagSet) fromEnv(name, envVar string, set func(string) error) {
	if v := f.lookup(envVar); v != "" {
		if err := set(v); err != nil {
			f.errs = append(f.errs, fmt.Errorf("%s=%q (for -%s): %w", envVar, v, name, err))
		}
	}
}

func (f *FlagSet) define(name, envVar, typ, usage, def string, set func(string) error) {
	v := value{set: set}
	cur := def
	v.get = func() string { return cur }
	v.set = func(s string) error {
		if err := set(s); err != nil {
			return err
		}
		cur = s
		return nil
	}
	f.fs.Var(v, name, usage+" ("+envVar+")")
	// The default -h shows is the compiled-in one, not the environment's.
	f.fs.Lookup(name).DefValue = def
	f.envs[name] = envVar
	f.types[name] = typ
}

// parse parses args, after the environment's errors.
func (f *FlagSet) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	if f.fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(f.fs.Args(), " "))
	}
	return errors.Join(f.errs...)
}

// usage writes the help text to w: each flag with its type, what it
// does, its variable and its compiled-in default.
func (f *FlagSet) usage(w io.Writer, service, about string) {
	fmt.Fprintf(w, "%s: %s\n\nUsage: %s [flags]\n\nFlags (each also read from the environment variable in parentheses; a flag given wins):\n", service, about, service)
	f.fs.VisitAll(func(fl *flag.Flag) {
		line := "  -" + fl.Name
		if t := f.types[fl.Name]; t != "" {
			line += " " + t
		}
		line += "\n    \t" + fl.Usage
		if fl.DefValue != "" && fl.DefValue != "false" {
			line += fmt.Sprintf(" (default %s)", fl.DefValue)
		}
		fmt.Fprintln(w, line)
	})
}

type value struct {
	get func() string
	set func(string) error
}

func (v value) String() string {
	if v.get == nil {
		return ""
	}
	return v.get()
}
func (v value) Set(s string) error { return v.set(s) }

type boolValue struct{ value }

func (boolValue) IsBoolFlag() bool { return true }
