package bench

import "k8s.io/apimachinery/pkg/api/resource"

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
