// Command admission runs the admission service: it validates, defaults and
// mutates workloads, asks quota, and persists them.
//
// A Secret's values are sealed for the key-encryption key whose public key
// file --kek-public names (ATOLL_ADMISSION_KEK_PUBLIC; `atoll-admin
// bootstrap kek` writes it): a file replaced by another KEK's is followed
// without a restart. Admission holds no private key; without the flag it
// refuses every Secret.
//
// The platform's managed sidecars and init containers come from the YAML
// file named by --config (ATOLL_ADMISSION_CONFIG; default: a small log
// shipper). Every setting is a flag and an environment variable
// (`admission -h`).
package main

import (
	"go.uber.org/fx"

	"atoll.dev/libs/daemon"
	"atoll.dev/libs/envelope"
	"atoll.dev/services/admission"
)

func main() {
	var configFile, kekPublic string
	daemon.Run(daemon.Command{
		Service: "admission",
		About:   "validates, defaults, mutates and persists workloads",
		Flags: func(f *daemon.FlagSet) {
			f.String(&configFile, "config", "ATOLL_ADMISSION_CONFIG", "", "YAML file of the platform's managed sidecars and init containers (default: a small log shipper)")
			f.String(&kekPublic, "kek-public", "ATOLL_ADMISSION_KEK_PUBLIC", "", "public key file of the key-encryption key Secrets are sealed for (\"<id> <base64>\", kek-<id>.pub; followed when replaced); without it Secrets are refused")
		},
	},
		fx.Provide(func() (*admission.Config, error) {
			cfg, err := admission.LoadConfig(configFile)
			if err != nil || kekPublic == "" {
				return cfg, err
			}
			sealer, err := envelope.LoadSealer(kekPublic)
			if err != nil {
				return nil, err
			}
			cfg.Sealer = sealer
			return cfg, nil
		}),
		admission.Module)
}
