// Package openapi builds the OpenAPI 3 documents both services serve at
// /openapi.json. Each router declares its operations (method, path,
// summary, parameters, and Go values standing for request and response
// bodies); schemas come from the Go types by reflection on their json
// tags, so a field added to a view type shows up in the document. The
// routers' tests compare the operations with the routes actually
// registered, both ways.
package openapi
