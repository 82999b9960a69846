package scheduler

import (
	"atoll.dev/libs/daemon"
)

// Module is the scheduler service for fx.
// Its lifecycle is daemon.ServiceModule's: Start and Stop as the
// application's hooks, Instrument and Ready on the admin server.
var Module = daemon.ServiceModule[*Service]("scheduler", New)
