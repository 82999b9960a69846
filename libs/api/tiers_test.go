package api_test

import (
	"testing"

	"atoll.dev/libs/api"
)

func TestPriorityIsValidated(t *testing.T) {
	tests := []struct {
		name     string
		priority int32
		wantErr  bool
	}{
		{"zero", 0, false},
		{"highest", api.MaxPriority, false},
		{"negative", -1, true},
		{"too high", api.MaxPriority + 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &api.AppSpec{}
			s.Priority = tc.priority
			s.Template.Containers = []api.Container{{Name: "c", Image: "x"}}
			s.Default()
			fe := s.Validate()
			got := false
			for _, e := range fe {
				if e.Field == "spec.priority" {
					got = true
				}
			}
			if got != tc.wantErr {
				t.Errorf("spec.priority error %v, want %v (errors %v)", got, tc.wantErr, fe)
			}
		})
	}
}

func TestBufferPercent(t *testing.T) {
	tests := []struct {
		label string
		set   bool
		want  int64
	}{
		{"", false, 7},
		{"20", true, 20},
		{"20%", true, 20},
		{"101", true, 7},
		{"x", true, 7},
	}
	for _, tc := range tests {
		t.Run(tc.label, func(t *testing.T) {
			c := &api.ClusterInfo{}
			if tc.set {
				c.Labels = map[string]string{api.LabelBufferPercent: tc.label}
			}
			if got := c.BufferPercent(7); got != tc.want {
				t.Errorf("BufferPercent = %d, want %d", got, tc.want)
			}
		})
	}
}
