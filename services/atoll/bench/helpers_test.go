package bench

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }

func waitSA(ctx context.Context, b *testing.B, sas typedcorev1.ServiceAccountInterface) {
	b.Helper()
	for ctx.Err() == nil {
		if _, err := sas.Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Fatal("default service account never appeared")
}
