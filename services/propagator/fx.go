package propagator

import (
	"atoll.dev/libs/daemon"
)

// Module is the propagator service for fx; it needs clusters.Members.
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("propagator", New)
