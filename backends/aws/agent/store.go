package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// ObjectStore is the agent's whole use of S3 (and the AWS worker's, which
// reads and writes the same layout). Bodies given to Put must be seekable
// (the SDK refuses unseekable bodies over plain HTTP).
type ObjectStore interface {
	// Get returns the object's body; the caller closes it. A missing object
	// is an error wrapping ErrNotFound.
	Get(ctx context.Context, bucket, key string) (io.ReadCloser, error)
	// Put writes size bytes of body to the object.
	Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64) error
	// List returns every key under prefix, in S3's (lexical) order.
	List(ctx context.Context, bucket, prefix string) ([]string, error)
}

// ErrNotFound is wrapped by ObjectStore.Get for a missing object.
var ErrNotFound = errors.New("agent: no such object")

// S3Store is the ObjectStore over an S3 client.
type S3Store struct{ c *s3.Client }

// NewS3Store returns the ObjectStore of client c.
func NewS3Store(c *s3.Client) S3Store { return S3Store{c} }

var _ ObjectStore = S3Store{}

func (s S3Store) Get(ctx context.Context, bucket, key string) (io.ReadCloser, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		var nk *types.NoSuchKey
		if errors.As(err, &nk) {
			return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, ErrNotFound)
		}
		return nil, fmt.Errorf("get s3://%s/%s: %w", bucket, key, err)
	}
	return out.Body, nil
}

func (s S3Store) Put(ctx context.Context, bucket, key string, body io.ReadSeeker, size int64) error {
	_, err := s.c.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key), Body: body, ContentLength: aws.Int64(size),
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", bucket, key, err)
	}
	return nil
}

func (s S3Store) List(ctx context.Context, bucket, prefix string) ([]string, error) {
	var keys []string
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
	}
	return keys, nil
}

// download writes the object to dst (through a temporary file renamed into
// place) and returns its size.
func Download(ctx context.Context, st ObjectStore, bucket, key, dst string) (int64, error) {
	body, err := st.Get(ctx, bucket, key)
	if err != nil {
		return 0, err
	}
	defer body.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".dl-"+filepath.Base(dst)+"-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return 0, fmt.Errorf("download s3://%s/%s to %s: %w", bucket, key, dst, err)
	}
	return n, nil
}

// uploadFile puts the file at src (an *os.File body, seekable).
func UploadFile(ctx context.Context, st ObjectStore, bucket, key, src string) (int64, error) {
	f, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if err := st.Put(ctx, bucket, key, f, fi.Size()); err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
