// Package wire holds the request and answer bodies of Lathe's HTTP API
// (docs/api.md): the scheduler encodes them, the API client
// (internal/apiclient) and the CLI (cmd/lathe-full) decode them, so the three
// cannot drift apart.
//
// The JSON of every type is the API's, field for field: names, order and
// omitempty are part of the contract. A body that is a stored record is
// the record's own type (jobtype.Job, jobtype.Event, jobtype.GPU,
// jobtype.GPUSeries, ledger.Record, ledger.Report) and is named, not
// copied, here. Wire imports only leaf packages of internal/ (jobtype,
// jobspec, ledger), never scheduler/, worker/, backends/ or cmd/: where an
// answer carries a routing type, its wire shape is defined here
// (Decision) and the scheduler converts to it.
package wire
