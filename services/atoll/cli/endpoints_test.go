package cli

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"atoll.dev/libs/computeapi"
)

func TestPrintEndpoints(t *testing.T) {
	for _, tc := range []struct {
		name string
		eps  computeapi.Endpoints
		want string
	}{
		{"no port", computeapi.Endpoints{}, "Address:  none (no named container port)\nNo endpoints.\n"},
		{"ports and endpoints", computeapi.Endpoints{
			Address: "web.atoll-shop.svc.cluster.local",
			Ports:   []computeapi.ServicePort{{Name: "http", Port: 8080, Protocol: "TCP", AppProtocol: "http"}, {Name: "dns", Port: 53, Protocol: "UDP"}},
			Endpoints: []computeapi.Endpoint{
				{Zone: "a", Cluster: "zone-a", Pod: "web-1", Ip: "10.16.0.1", Ready: true, Node: "n1"},
				{Zone: "b", Cluster: "zone-b", Pod: "web-2", Ip: "10.32.0.1"},
			},
		}, `Address:  web.atoll-shop.svc.cluster.local
Ports:    http 8080/TCP (http), dns 53/UDP

ZONE  CLUSTER  POD    ADDRESS    READY  NODE
a     zone-a   web-1  10.16.0.1  yes    n1
b     zone-b   web-2  10.32.0.1  no     
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printEndpoints(&b, &tc.eps)
			if diff := cmp.Diff(tc.want, b.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}
