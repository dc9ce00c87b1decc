/// The page's own words in English and Korean, in the strings file format
/// (see `StringsFile`). English defines the keys: a custom strings file may
/// only set keys that are here, and any key a language leaves out is taken
/// from English.
enum BuiltInStrings {
    static let byLanguage: [(language: String, text: String)] = [("en", english), ("ko", korean)]

    static let english = """
        # Text direction of the language: ltr or rtl.
        direction = ltr

        # The block page.
        title = Page blocked
        heading = This page is blocked
        explanation = The content filter on this computer stopped this page from opening.
        hostLabel = Site
        urlLabel = Address
        categoryLabel = Category
        ruleLabel = Rule
        reasonLabel = Reason
        help = If you need this page for schoolwork, ask your teacher.

        # The built-in request-access form (its heading is blockPage.requestAccess.text).
        formReasonLabel = Why do you need this page? (optional)
        formSubmit = Send request

        # After the form was sent.
        receivedTitle = Request sent
        receivedHeading = Your request has been sent
        receivedText = Someone at your school will look at it. The page stays blocked until it is allowed.
        requestIdLabel = Request number

        # Error pages.
        errorTitle = Error
        errorCodeLabel = Error code
        errorBadRequest = The request could not be understood.
        errorNotFound = There is no page here.
        errorMethodNotAllowed = This kind of request is not allowed here.
        errorTooLarge = The request was too large.
        errorOther = Something went wrong. Please try again later.
        """

    static let korean = """
        direction = ltr

        title = 차단된 페이지
        heading = 이 페이지는 차단되었습니다
        explanation = 이 컴퓨터의 콘텐츠 필터가 이 페이지를 열지 못하도록 막았습니다.
        hostLabel = 사이트
        urlLabel = 주소
        categoryLabel = 분류
        ruleLabel = 규칙
        reasonLabel = 사유
        help = 수업에 필요한 페이지라면 선생님께 말씀해 주세요.

        formReasonLabel = 이 페이지가 필요한 이유 (선택 사항)
        formSubmit = 요청 보내기

        receivedTitle = 요청 완료
        receivedHeading = 요청을 보냈습니다
        receivedText = 학교 담당자가 요청을 검토합니다. 허용되기 전까지는 이 페이지가 계속 차단됩니다.
        requestIdLabel = 요청 번호

        errorTitle = 오류
        errorCodeLabel = 오류 코드
        errorBadRequest = 요청을 이해할 수 없습니다.
        errorNotFound = 이 주소에는 페이지가 없습니다.
        errorMethodNotAllowed = 여기에서는 허용되지 않는 요청 방식입니다.
        errorTooLarge = 요청이 너무 큽니다.
        errorOther = 문제가 발생했습니다. 잠시 후 다시 시도해 주세요.
        """
}
